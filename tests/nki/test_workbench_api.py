"""The notebook-facing API: ``@nki.jit`` kernels on numpy, ``simulate`` (latency, engine busy time,
the timeline as a Profile and a Perfetto trace), ``nki.benchmark``'s latency percentiles, SPMD grids."""
import json

import numpy as np
import pytest

from workbench import nki
import workbench.nki.isa as nisa
import workbench.nki.language as nl


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        nl.store(out[rows, :], value=nisa.tensor_tensor(nl.load(a[rows, :]), nl.load(b[rows, :]), op=nl.add))
    return out


def _inputs():
    rng = np.random.default_rng(0)
    return rng.standard_normal((2, 512, 256)).astype(np.float32)


def test_jit_kernel_on_numpy_returns_numpy():
    a, b = _inputs()
    np.testing.assert_array_equal(add_kernel(a, b), a + b)
    np.testing.assert_array_equal(nki.simulate_kernel(add_kernel, a, b), a + b)


def test_simulate_reports_latency_engine_busy_and_a_timeline(tmp_path):
    a, b = _inputs()
    result = add_kernel.simulate(a, b, target="trn2")
    assert result.latency_ns > 0 and result.instruction_counts == {"dma": 12, "vector": 4}
    busy = result.engine_busy_ns
    assert 0 < busy["vector"] < result.latency_ns
    profile = result.profile()
    events = profile.instructions
    assert set(events.engine.str.rstrip("0123456789")) == {"vector", "dma"}
    assert profile.summary["total_time"] == pytest.approx(result.latency_ns * 1e-9)
    path = profile.export_chrome_trace(tmp_path / "kernel.json")
    trace = json.loads(path.read_text())
    assert any(e.get("name") == "tensor_tensor" for e in trace["traceEvents"])


def test_benchmark_reports_percentiles_in_microseconds():
    a, b = _inputs()
    bench = nki.benchmark(add_kernel, warmup=2, iters=5)
    np.testing.assert_array_equal(bench(a, b), a + b)
    latency = bench.benchmark_result.nc_latency
    expected_us = add_kernel.simulate(a, b).latency_ns / 1e3
    assert latency.get_latency_percentile(50) == latency.get_latency_percentile(99) == pytest.approx(expected_us)


def test_timing_only_arguments_by_shape():
    spec = nki.typing.tensor[[4096, 256], nl.bfloat16]
    result = add_kernel.simulate(spec, spec)
    assert result.outputs is None and result.instruction_counts["vector"] == 32


def test_buffers_option_changes_the_schedule_not_the_values():
    a, b = _inputs()
    one, two = add_kernel.options(buffers=1), add_kernel.options(buffers=2)
    np.testing.assert_array_equal(one(a, b), two(a, b))
    assert one.simulate(a, b).latency_ns >= two.simulate(a, b).latency_ns


def test_spmd_grid_runs_each_program_instance():
    @nki.jit
    def halves(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        rows = slice(i * 128, (i + 1) * 128)
        nl.store(out[rows, :], value=nl.multiply(nl.load(a[rows, :]), float(nl.num_programs(0))))
        return out
    a, _ = _inputs()
    np.testing.assert_array_equal(halves[4](a), a * 4)
