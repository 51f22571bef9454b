"""GpuSession: OpRecords in, a cuda Trace out."""
from __future__ import annotations

import pytest

from backend.sim.flops import op_flops, op_min_bytes
from backend.sim.gpu import GPU_ENGINES, GpuSession, h100, record_cost
from gpu_records import ROUND, T, rec

MM = rec("aten::mm", [T(1024, 1024), T(1024, 1024)], [T(1024, 1024)])
RELU = rec("aten::relu", [T(1024, 1024)], [T(1024, 1024)])


def fed(*records, **kwargs) -> GpuSession:
    session = GpuSession(kwargs.pop("preset", ROUND), **kwargs)
    for r in records:
        session.feed(r)
    return session


def test_trace_header_is_the_gpu():
    trace = GpuSession("h100").trace
    assert (trace.target, trace.device_kind) == ("h100", "cuda")
    assert trace.peak_flops_per_s == h100.bf16_tensor_flops_per_s
    assert trace.hbm_bytes_per_s == h100.hbm_bytes_per_s
    assert trace.engines == GPU_ENGINES == ("tensor_core", "cuda_core", "hbm", "copy")


def test_bf16_mm_is_one_tensor_core_kernel():
    session = fed(MM)
    (op,) = session.trace.ops
    cost = record_cost(ROUND, MM, ROUND.launch_overhead_ns)
    assert (op.kind, op.name, op.start_ns) == ("op", "aten::mm", 0.0)
    assert op.time_ns == pytest.approx(cost.total_ns)
    assert op.flops == op_flops(MM) == 2 * 1024**3
    assert op.hbm_bytes == op_min_bytes(MM) == 3 * 1024 * 1024 * 2
    assert op.hbm_read_bytes == 2 * 1024 * 1024 * 2
    assert set(op.busy_ns) == set(GPU_ENGINES)
    assert op.busy_ns["tensor_core"] == cost.tensor_ns > 0 and op.busy_ns["cuda_core"] == 0
    tracks = {e.engine: e for e in session.trace.events}
    assert set(tracks) == {"tensor_core", "hbm"}
    # the kernel starts on the device after the launch overhead
    assert tracks["tensor_core"].start_ns == tracks["hbm"].start_ns == ROUND.launch_overhead_ns
    assert tracks["tensor_core"].flops == op.flops
    assert tracks["hbm"].bytes_moved == op.hbm_bytes


def test_fp32_mm_runs_on_cuda_cores():
    mm32 = rec("aten::mm", [T(256, 256, dtype="float32")] * 2, [T(256, 256, dtype="float32")])
    (op,) = fed(mm32).trace.ops
    assert op.busy_ns["tensor_core"] == 0 and op.busy_ns["cuda_core"] > 0


def test_ops_run_back_to_back_and_views_are_free():
    view = rec("aten::view", [T(1024, 1024)], [T(1024 * 1024)], is_view=True)
    mm, v, relu = fed(MM, view, RELU).trace.ops
    assert v.kind == "view" and v.time_ns == 0 and v.start_ns == mm.end_ns
    assert relu.start_ns == mm.end_ns
    assert v.hbm_bytes == 0 and v.instruction_count == 0
    assert not [e for e in fed(view).trace.events]


def test_fallback_records_cost_as_normal_kernels():
    plain = fed(RELU).trace.ops[0]
    fallback = fed(rec("aten::relu", RELU.inputs, RELU.outputs, fallback=True)).trace.ops[0]
    assert fallback.kind == "op" and fallback.time_ns == plain.time_ns


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_transfers_go_over_pcie_on_the_copy_engine(direction):
    t = T(1000, 500, dtype="float32")    # 2 MB at 1 GB/s = 2 ms
    (op,) = fed(rec("aten::_to_copy", [t], [t], transfer=direction)).trace.ops
    assert op.kind == "transfer"
    assert op.time_ns == pytest.approx(ROUND.launch_overhead_ns + 2_000_000)
    assert op.busy_ns["copy"] == pytest.approx(2_000_000)
    written = direction == "h2d"
    assert (op.hbm_write_bytes, op.hbm_read_bytes) == ((2_000_000, 0) if written else (0, 2_000_000))
    (event,) = fed(rec("aten::_to_copy", [t], [t], transfer=direction)).trace.events
    assert (event.engine, event.opcode) == ("copy", f"memcpy_{direction}")


def test_unknown_transfer_kind_is_an_error():
    with pytest.raises(ValueError, match="h2d"):
        fed(rec("aten::_to_copy", [T(4)], [T(4)], transfer="p2p"))


def test_graph_replay_charges_the_smaller_launch():
    eager = fed(RELU).trace.ops[0]
    replay = fed(RELU, graph_replay=True).trace.ops[0]
    assert eager.time_ns - replay.time_ns == pytest.approx(1000.0 - 250.0)


def test_fused_kernel_is_one_launch_with_less_traffic():
    intermediate = 1024 * 1024 * 2      # mm's output, read by relu: stays on chip
    session = GpuSession(ROUND)
    session.feed_kernel("fused_mm_relu", [MM, RELU], internal_bytes_saved=2 * intermediate,
                        nodes=("mm", "relu"))
    (kernel,) = session.trace.ops
    assert (kernel.kind, kernel.name, kernel.nodes) == ("kernel", "fused_mm_relu", ("mm", "relu"))
    assert kernel.flops == op_flops(MM) + op_flops(RELU)
    assert kernel.hbm_bytes == op_min_bytes(MM) + op_min_bytes(RELU) - 2 * intermediate
    assert kernel.hbm_read_bytes == 2 * intermediate and kernel.hbm_write_bytes == intermediate
    assert kernel.busy_ns["cuda_core"] > 0 and kernel.busy_ns["tensor_core"] > 0
    eager = fed(MM, RELU).trace
    assert kernel.time_ns < eager.total_time_ns
    assert "1024x1024 bfloat16" in kernel.input_shapes


def test_event_cap_keeps_every_op():
    session = fed(MM, RELU, MM, max_events=2)
    assert len(session.trace.ops) == 3
    # each op here has a compute and an hbm event: 6 in all
    assert len(session.trace.events) == 2 and session.trace.events_dropped == 4


def test_reset_restarts_the_clock():
    session = fed(MM)
    session.reset()
    assert session.trace.ops == [] and session.trace.total_time_ns == 0
    session.feed(RELU)
    assert session.trace.ops[0].start_ns == 0.0


def test_summary_reports_gpu_utilisation():
    summary = fed(MM, RELU, preset="h100").trace.summary()
    assert summary["device_kind"] == "cuda"
    assert 0 < summary["mfu_estimated_percent"] < 100
    assert 0 < summary["tensor_engine_active_time_percent"] < 100
    # each kernel's 6 MiB fit H100's L2: they are served there, not by HBM
    assert summary["l2_read_bytes"] == 3 * 1024 * 1024 * 2 and summary["hbm_read_bytes"] == 0
    assert summary["instruction_count"] == 2


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match="a100, h100, h200"):
        GpuSession("v100")
