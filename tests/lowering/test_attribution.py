"""Per-op engine attribution over a transformer block, on every target."""
import pytest

from backend.lowering import simulate
from benchmarks.op_streams import OpStream, transformer_block

TARGETS = ["trn1", "trn2", "trn3"]


@pytest.fixture(scope="module", params=TARGETS)
def block_ops(request):
    s = OpStream("bfloat16")
    transformer_block(s, batch=4, seq=128, d=768, heads=12, backward=True)
    trace = simulate(s.records, request.param)
    return trace, [op for op in trace.ops if op.kind != "view"]


def top_engine(op):
    compute = {k: v for k, v in op.busy_ns.items() if k in ("tensor", "vector", "scalar", "gpsimd")}
    return max(compute, key=compute.get)


def by_name(ops, name):
    found = [op for op in ops if op.name == name]
    assert found, name
    return found


def test_matmuls_run_on_tensor_engine(block_ops):
    _, ops = block_ops
    for op in by_name(ops, "aten::addmm") + by_name(ops, "aten::mm"):
        assert top_engine(op) == "tensor", op.name
        assert op.hardware_flops >= op.flops > 0


def test_activations_run_on_scalar_engine(block_ops):
    _, ops = block_ops
    for op in by_name(ops, "aten::gelu"):
        assert top_engine(op) == "scalar"
    for op in by_name(ops, "aten::gelu_backward"):
        assert op.busy_ns["scalar"] > 0


def test_norms_and_softmax_run_on_vector_engine(block_ops):
    _, ops = block_ops
    for op in by_name(ops, "aten::native_layer_norm") + by_name(ops, "aten::native_layer_norm_backward"):
        assert op.busy_ns["vector"] >= max(op.busy_ns.get("scalar", 0), op.busy_ns.get("gpsimd", 0))
    attn = by_name(ops, "aten::_scaled_dot_product_flash_attention_for_cpu")[0]
    assert {"tensor", "vector", "scalar", "gpsimd"} <= set(attn.busy_ns)   # matmuls, max, exp, causal mask


def test_elementwise_adds_are_dma_bound(block_ops):
    _, ops = block_ops
    for op in by_name(ops, "aten::add"):
        per_engine_dma = op.busy_ns["dma"] / 16
        assert per_engine_dma > op.busy_ns["vector"]
        assert op.hbm_bytes / op.time_ns > 0.3 * 1e-9 * 362e9      # a good share of the HBM rate


def test_trace_summary_is_consistent(block_ops):
    trace, ops = block_ops
    s = trace.summary()
    assert s["total_time_ns"] == pytest.approx(trace.ops[-1].end_ns - trace.ops[0].start_ns)
    assert s["hbm_read_bytes"] == sum(op.hbm_read_bytes for op in ops)
    assert s["tensor_engine_active_time_percent"] > s["gpsimd_engine_active_time_percent"]
    assert 0 < s["mfu_estimated_percent"] <= s["hfu_estimated_percent"] <= 100
    for a, b in zip(trace.ops, trace.ops[1:]):
        assert b.start_ns >= a.end_ns - 1e-6           # eager ops run back to back
