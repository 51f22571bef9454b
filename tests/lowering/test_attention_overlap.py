"""Attention lowering: engines overlap across head groups, with dependencies only where data flows."""
from backend.lowering import lower
from backend.lowering.attention import software_pipeline
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.scheduler import Simulator

COMPUTE = ("tensor", "vector", "scalar", "gpsimd")


def _sdpa(heads: int, seq: int, causal: bool = False) -> OpRecord:
    q = TensorDesc((1, heads, seq, 64), "bfloat16")
    return OpRecord(0, "aten::_scaled_dot_product_flash_attention_for_cpu", (q, q, q),
                    (q, TensorDesc((1, heads, seq), "float32")), {"is_causal": causal})


def test_engines_overlap_up_to_the_busiest():
    for causal in (False, True):
        op = Simulator("trn2").run(lower(_sdpa(8, 512, causal), "trn2")).ops[0]
        busy = [op.busy_ns.get(e, 0.0) for e in COMPUTE]
        elapsed = op.end_ns - op.start_ns
        assert max(busy) <= elapsed < sum(busy), (elapsed, op.busy_ns)
        if not causal:      # software pipelined: within the pipeline's fill and drain of the busiest
            assert elapsed < 1.2 * max(busy)


def test_dependencies_are_data_flow_and_buffer_reuse():
    """Three heads, three groups, in modulo order: (engine, opcode, deps) exactly."""
    program = lower(_sdpa(3, 128), "trn2")
    got = [(i.engine, i.opcode, i.deps) for i in program.instructions]
    load = ("dma", "dma_copy", ())
    assert got == [
        load, load, load,                                   # g0 Q, K, V
        ("tensor", "nc_transpose", (0, 1, 2)),              # g0 Q^T, K^T
        ("tensor", "nc_matmul", (3,)),                      # g0 scores
        load, load, load,                                   # g1 loads
        ("vector", "tensor_reduce", (4,)),                  # g0 max: its scores only
        ("tensor", "nc_transpose", (5, 6, 7)),
        ("tensor", "nc_matmul", (9,)),                      # g1 scores (g0's softmax not waited for)
        load, load, load,                                   # g2 loads
        ("scalar", "activation_reduce", (8,)),              # g0 exp: its max only
        ("vector", "tensor_reduce", (10,)),
        ("tensor", "nc_transpose", (11, 12, 13)),
        ("tensor", "nc_matmul", (14, 16)),                  # g2 scores reuse g0's PSUM after g0's exp
        ("tensor", "nc_transpose", (14,)),                  # g0 P^T: the exp, not the row sums
        ("scalar", "activation_reduce", (15,)),
        ("vector", "tensor_reduce", (17,)),
        ("vector", "tensor_copy", (18,)),                   # g0 P^T evacuated
        ("vector", "reciprocal", (14,)),                    # g0 row sums
        ("tensor", "nc_transpose", (19,)),
        ("scalar", "activation_reduce", (20,)),
        ("tensor", "nc_matmul", (0, 1, 2, 21)),             # g0 O = P V: P^T and V
        ("vector", "tensor_copy", (23,)),
        ("vector", "reciprocal", (19,)),
        ("tensor", "nc_transpose", (21, 24)),               # g2 P^T reuses g0's PSUM after its copy
        ("vector", "tensor_scalar", (22, 25)),              # g0 scaling: row sums and O
        ("dma", "dma_copy", (29,)), ("dma", "dma_copy", (29,)),
        ("tensor", "nc_matmul", (5, 6, 7, 26)),
        ("vector", "tensor_copy", (28,)),
        ("vector", "reciprocal", (24,)),
        ("vector", "tensor_scalar", (27, 32)),
        ("dma", "dma_copy", (35,)), ("dma", "dma_copy", (35,)),
        ("tensor", "nc_matmul", (11, 12, 13, 29, 33)),      # g2 O reuses g0's PSUM after its scaling
        ("vector", "tensor_scalar", (34, 38)),
        ("dma", "dma_copy", (39,)), ("dma", "dma_copy", (39,)),
    ]


def test_software_pipeline_emits_stage_k_of_group_s_minus_k_newest_stage_first():
    order = []
    stages = [lambda g, r, ids, k=k: order.append((g, k)) for k in range(3)]
    software_pipeline([1, 1, 1], stages, [{}, {}, {}])
    assert order == [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (2, 0), (1, 2), (2, 1), (2, 2)]
    order.clear()
    software_pipeline([1, 1], stages, [{}, {}], depth=1)
    assert order == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    order.clear()       # three buffers for five stages: stages 0-1 and 2-3 run as one
    stages = [lambda g, r, ids, k=k: order.append((g, k)) for k in range(5)]
    software_pipeline([1, 1, 1], stages, [{}, {}, {}], depth=3)
    assert order == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (0, 4), (1, 2), (1, 3), (2, 0), (2, 1),
                     (1, 4), (2, 2), (2, 3), (2, 4)]


def test_backward_lowers_with_every_group_finished():
    q = TensorDesc((2, 12, 512, 64), "bfloat16")
    record = OpRecord(0, "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                      (q, q, q, q, q, TensorDesc((2, 12, 512), "float32")), (q, q, q), {"is_causal": True})
    op = Simulator("trn2").run(lower(record, "trn2")).ops[0]
    busy = [op.busy_ns.get(e, 0.0) for e in COMPUTE]
    assert max(busy) <= op.end_ns - op.start_ns < sum(busy)
