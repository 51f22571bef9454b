"""EagerSession / simulate, and fused kernels with SBUF-resident intermediates."""
import pytest

from backend.lowering import EagerSession, lower, lower_kernel, simulate
from backend.sim import OpRecord, Simulator, TensorDesc, derive
from backend.sim.presets import MiB as MIB

T = TensorDesc


def mlp_records(rows=1024, d=768, hidden=3072, dtype="bfloat16"):
    x, w = T((rows, d), dtype), T((d, hidden), dtype, (1, d))
    h = T((rows, hidden), dtype)
    return [OpRecord(0, "aten::addmm", (T((hidden,), dtype), x, w), (h,), {"beta": 1}),
            OpRecord(1, "aten::gelu", (h,), (h,), {}),
            OpRecord(2, "aten::mul", (h, h), (h,), {})]


LINKS = {(1, 0): (0, 0), (2, 0): (1, 0), (2, 1): (0, 0)}


def test_session_feeds_back_to_back_and_resets():
    session = EagerSession("trn1")
    for r in mlp_records():
        session.feed(r)
    trace = session.trace
    assert [op.name for op in trace.ops] == ["aten::addmm", "aten::gelu", "aten::mul"]
    assert trace.target == "trn1" and trace.device_kind == "neuron"
    assert session.now_ns == trace.ops[-1].end_ns
    same = simulate(mlp_records(), "trn1")
    assert same.to_records() == trace.to_records()
    session.reset()
    assert session.trace.ops == [] and session.now_ns == 0


def test_feed_program_runs_a_kernel_on_the_session_timeline():
    session = EagerSession("trn2")
    session.feed(mlp_records()[0])
    summary = session.feed_program(lower_kernel("fused_gelu_mul", mlp_records()[1:], "trn2",
                                                links={(1, 0): (0, 0)}, nodes=("gelu", "mul")))
    assert summary.kind == "kernel" and summary.nodes == ("gelu", "mul")
    assert summary.start_ns >= session.trace.ops[0].end_ns


def test_fusion_keeps_intermediates_on_chip():
    records = mlp_records()
    eager = simulate(records, "trn2")
    kernel = lower_kernel("mlp", records, "trn2", links=LINKS)
    fused = Simulator("trn2").run(kernel).ops[0]
    assert kernel.kind == "kernel" and kernel.info.spill_bytes == 0
    eager_bytes = sum(op.hbm_bytes for op in eager.ops)
    # the two intermediates (1024 x 3072 bf16, written and re-read) never cross HBM
    assert eager_bytes - fused.hbm_bytes >= 4 * 1024 * 3072 * 2
    assert fused.time_ns < eager.total_time_ns
    assert fused.launch_overhead_ns == eager.ops[0].launch_overhead_ns     # one launch, not three


def test_compile_path_dataflow_format_matches_links():
    records = mlp_records()
    by_links = lower_kernel("k", records, "trn2", links=LINKS)
    by_flow = lower_kernel("k", records, "trn2", inputs_from=((None, None, None), ((0, 0),), ((1, 0), (0, 0))),
                           outputs_to_hbm=((False,), (False,), (True,)))
    a, b = Simulator("trn2").run(by_links).ops[0], Simulator("trn2").run(by_flow).ops[0]
    assert (a.time_ns, a.hbm_bytes) == (b.time_ns, b.hbm_bytes)


def test_small_sbuf_spills_intermediates():
    tiny = derive("trn2", sbuf_bytes=4 * MIB)
    kernel = lower_kernel("mlp", mlp_records(), tiny, links=LINKS)
    assert kernel.info.spill_bytes >= 2 * 1024 * 3072 * 2
    roomy = Simulator(tiny).run(lower_kernel("mlp", mlp_records(), "trn2", links=LINKS)).ops[0]
    spilled = Simulator(tiny).run(kernel).ops[0]
    assert spilled.hbm_bytes > roomy.hbm_bytes


def test_bad_links_rejected():
    with pytest.raises(ValueError, match="bad link"):
        lower_kernel("k", mlp_records(), links={(0, 0): (1, 0)})


def test_unlowered_op_inside_a_kernel_goes_to_the_host():
    x = T((64, 64), "float32")
    kernel = lower_kernel("k", [OpRecord(0, "aten::linalg_svd", (x,), (x,) * 3, {}),
                                OpRecord(1, "aten::exp", (x,), (x,), {})], links={(1, 0): (0, 0)})
    assert kernel.sync
    assert Simulator("trn2").run(kernel).ops[0].busy_ns["host"] > 0


def test_gpt2_step_simulates():
    from benchmarks.op_streams import gpt2_training_step
    records = gpt2_training_step(layers=2)
    trace = simulate(records, "trn2")
    assert len(trace.ops) == len(records)
    s = trace.summary()
    assert s["fallback_count"] == 0
    assert s["total_time_ns"] > 0 and s["instruction_count"] > len(records)
    assert lower(records[0]).kind == "op"


def test_views_inside_a_kernel_alias_their_source():
    x = T((1024, 768), "float32")
    y = T((768, 1024), "float32", (1, 768))
    records = [OpRecord(0, "aten::exp", (x,), (x,), {}),
               OpRecord(1, "aten::t", (x,), (y,), {}, is_view=True),
               OpRecord(2, "aten::mul", (y, y), (T((768, 1024), "float32"),), {})]
    kernel = lower_kernel("k", records, links={(1, 0): (0, 0), (2, 0): (1, 0), (2, 1): (1, 0)})
    fused = Simulator("trn2").run(kernel).ops[0]
    assert kernel.info.spill_bytes == 0
    assert fused.hbm_read_bytes == x.nbytes and fused.hbm_write_bytes == x.nbytes


def _chain(rows, cols, dtype="bfloat16"):
    """exp -> mul -> (mm as the left operand | mm as the right operand) over [rows, cols]."""
    x, w = T((rows, cols), dtype), T((cols, 256), dtype)
    left = [OpRecord(0, "aten::exp", (x,), (x,), {}), OpRecord(1, "aten::mul", (x, x), (x,), {}),
            OpRecord(2, "aten::mm", (x, w), (T((rows, 256), dtype),), {})]
    right = left[:2] + [OpRecord(2, "aten::mm", (T((256, rows), dtype), x), (T((256, cols), dtype),), {})]
    return left, right


def test_pointwise_chains_stream_tile_by_tile_through_sbuf():
    # [8192, 8192] bf16 = 128 MiB per intermediate, ~5x the SBUF: streamed, nothing spills, and
    # the left operand of a matmul is consumed one block of rows at a time.
    left, _ = _chain(8192, 8192)
    kernel = lower_kernel("k", left, "trn2", links={(1, 0): (0, 0), (1, 1): (0, 0), (2, 0): (1, 0)})
    assert kernel.info.spill_bytes == 0
    # footprints: exp's output 2 x 128 partitions x 8 KiB tiles, mul's a 2 x 128-row block of 16 KiB rows
    assert kernel.info.sbuf_peak_bytes >= 2 * 128 * 8192 * 2


def test_right_operand_of_a_matmul_stays_whole_and_spills_when_it_cannot():
    _, right = _chain(8192, 8192)
    kernel = lower_kernel("k", right, "trn2", links={(1, 0): (0, 0), (1, 1): (0, 0), (2, 1): (1, 0)})
    whole = 8192 * 8192 * 2
    assert kernel.info.spill_bytes == whole * 2          # stored once, loaded once by the matmul


def test_matmul_plans_its_blocks_in_what_the_kernels_residents_leave():
    # exp's output (8 MiB) is the right operand of the matmul: it stays whole in SBUF, so the GEMM
    # may only block in the rest; kernel and GEMM together stay within usable SBUF.
    from backend.lowering.gemm import TensorEngineGemm, plan_blocked_gemm
    from backend.sim import get_target
    t = get_target("trn1")
    x, y, out = T((2048, 2048), "bfloat16"), T((8192, 2048), "bfloat16"), T((8192, 2048), "bfloat16")
    records = [OpRecord(0, "aten::exp", (x,), (x,), {}), OpRecord(1, "aten::mm", (y, x), (out,), {})]
    resident = 2048 * 2048 * 2
    alone = plan_blocked_gemm(TensorEngineGemm(batch=1, m=8192, k=2048, n=2048, dtype="bfloat16",
                                               out_dtype="bfloat16", a_transposed=False, b_transposed=False), t)
    assert alone.sbuf_bytes + resident > t.sbuf_usable_bytes        # the plan made alone would not fit
    kernel = lower_kernel("k", records, t, links={(1, 1): (0, 0)})
    assert kernel.info.spill_bytes == 0
    assert resident < kernel.info.sbuf_peak_bytes <= t.sbuf_usable_bytes


def test_a_value_handed_over_is_booked_once_however_many_ops_read_it():
    h = T((2048, 2048), "bfloat16")                                  # 8 MiB
    records = [OpRecord(0, "aten::mul", (h, h), (h,), {})]
    kernel = lower_kernel("k", records, "trn1", resident_inputs=[((0, 0), (0, 1))])
    assert h.nbytes <= kernel.info.sbuf_peak_bytes < 2 * h.nbytes
