"""The sensitivity pass on a two-instruction stream, pinned to the formulas by hand."""
import pytest

from backend.lowering.builder import Builder
from backend.lowering.timeline import replay
from backend.sim import Program, Simulator, get_target
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.sensitivity import Knob, knobs_for, time_band

SHARE = "tensor.matmul_access_overhead_share"
DESCRIPTOR = "preset:dma_descriptor_overhead_bytes"


def _matmul_then_dma(target) -> float:
    """10 bf16 matmuls (stationary 128, moving 512), then a dependent 32 KiB load on 4 partitions."""
    program = Program("tiny", "kernel")
    b = Builder(program, target)
    mm = b.matmul(k=128, m=128, n=512, dtype="bfloat16", repeat=10)
    b.dma(32 * 1024, src="hbm", dst="sbuf", partitions=4, row_bytes=8192, deps=(mm,))
    return Simulator(target).run(program).total_time_ns


def _expected_ns(share: float, descriptor_bytes: float) -> float:
    # trn1: TensorE 2.8 GHz, (512 + share * 60 access cycles) per matmul; the DMA starts 1300 ns
    # after the matmuls, on one engine (4 partitions) at 17 B/ns with 4 descriptors of overhead.
    return 10 * (512 + share * 60) / 2.8 + 1300 + 32768 / 17 + 4 * descriptor_bytes / 17


def test_band_of_a_tiny_stream_is_exact():
    knobs = [Knob(SHARE, 1.0, 0.0, 1.0), Knob(DESCRIPTOR, 256, 128, 512)]
    band = time_band(_matmul_then_dma, "trn1", knobs)
    assert band.nominal_ns == pytest.approx(_expected_ns(1.0, 256), rel=1e-12)
    assert band.low_ns == pytest.approx(_expected_ns(0.0, 128), rel=1e-12)
    assert band.high_ns == pytest.approx(_expected_ns(1.0, 512), rel=1e-12)
    share, descriptor = sorted(band.effects, key=lambda e: e.knob.name)[::-1]
    assert share.knob.name == SHARE and share.swing_ns == pytest.approx(600 / 2.8, rel=1e-12)
    assert descriptor.swing_ns == pytest.approx(4 * 384 / 17, rel=1e-12)
    assert [e.knob.name for e in band.dominant()] == [SHARE, DESCRIPTOR]     # 214 ns > 90 ns
    assert (share.slow_end, share.fast_end, descriptor.slow_end) == (1.0, 0.0, 512)
    assert str(band) == "5.33 us (5.09-5.39)"


def test_band_ignores_knobs_that_do_not_move_the_run():
    band = time_band(_matmul_then_dma, "trn1", [Knob("stream.max_groups", 8, 4, 16)])
    assert band.low_ns == band.nominal_ns == band.high_ns and band.dominant() == ()


def test_default_knobs_cover_registry_and_labelled_preset_fields():
    names = {k.name for k in knobs_for(get_target("trn2"))}
    assert {SHARE, "gemm.sbuf_budget_fraction", DESCRIPTOR, "preset:launch_overhead_ns"} <= names
    assert "preset:sbuf_bytes" not in names          # cited hardware facts are not varied


def test_replay_of_a_kept_workload_matches_the_session():
    from backend.lowering import EagerSession
    x = TensorDesc((256, 512), "float32")
    records = [OpRecord(0, "aten::mm", (x, TensorDesc((512, 256), "float32")), (TensorDesc((256, 256), "float32"),)),
               OpRecord(1, "aten::relu", (TensorDesc((256, 256), "float32"),), (TensorDesc((256, 256), "float32"),))]
    session = EagerSession("trn2", keep_workload=True)
    for r in records:
        session.feed(r)
    assert session.workload == records
    assert replay(session.workload, "trn2") == session.trace.total_time_ns
    assert EagerSession("trn2").workload is None
