"""Lowerings that keep common training ops on the device: pooling, view gradients, sorting,
resampling, losses, foreach/fused optimizers, and TensorE auto-cast. Exact counts where the
mapping fixes them, roofline and engine properties elsewhere."""
from math import ceil, log2

import pytest

from backend.lowering import lower, op_flops, op_min_bytes, registered_lowerings
from backend.lowering.eager import HOST_ONLY_OPS
from backend.lowering.foreach import foreach_lists
from backend.lowering.registry import lowering
from backend.lowering.sorting import bitonic_stages, sort_stages
from backend.sim import Instruction, OpRecord, Simulator, TensorDesc, get_target
from backend.sim.costs import instruction_ns

F32, I64 = "float32", "int64"
TRN2 = get_target("trn2")


def T(*shape, dtype=F32, strides=None):
    return TensorDesc(tuple(shape), dtype, strides)


def rec(name, inputs, outputs, **attrs):
    return OpRecord(0, name, tuple(inputs), tuple(outputs), attrs)


def sim(program):
    return Simulator("trn2").run(program).ops[0]


def hw(program, engine, opcode, attr=None):
    """Hardware instructions of one kind (``attr``: (key, value) they must carry)."""
    return sum(i.repeat for i in program.instructions if i.engine == engine and i.opcode == opcode
               and (attr is None or i.attr(attr[0]) == attr[1]))


def elements(program, engine, opcode):
    """Elements streamed by those instructions (partitions x free size x repeat)."""
    return sum(i.repeat * i.partitions * i.free_size for i in program.instructions
               if i.engine == engine and i.opcode == opcode)


IMG, POOLED = T(2, 64, 16, 16), T(2, 64, 8, 8)
ROW, COLS = T(256, 1000), T(8, 50257)
PARAMS = [T(64, 32), T(32), T(16, 64), T(16)]
# (record, engine that must do the work)
CASES = [
    (rec("aten::max_pool2d_with_indices", [IMG], [POOLED, T(2, 64, 8, 8, dtype=I64)], kernel_size=[2, 2]), "vector"),
    (rec("aten::max_pool2d_with_indices_backward", [POOLED, IMG, T(2, 64, 8, 8, dtype=I64)], [IMG],
         kernel_size=[3, 3], stride=[2, 2], padding=[1, 1]), "vector"),
    (rec("aten::max_pool3d_with_indices", [T(1, 8, 8, 8, 8)], [T(1, 8, 4, 4, 4), T(1, 8, 4, 4, 4, dtype=I64)],
         kernel_size=[2, 2, 2]), "vector"),
    (rec("aten::adaptive_max_pool2d", [IMG], [T(2, 64, 3, 3), T(2, 64, 3, 3, dtype=I64)], output_size=[3, 3]),
     "vector"),
    (rec("aten::avg_pool2d", [IMG], [POOLED], kernel_size=[2, 2]), "vector"),
    (rec("aten::avg_pool2d_backward", [POOLED, IMG], [IMG], kernel_size=[2, 2], stride=[]), "vector"),
    (rec("aten::_adaptive_avg_pool2d", [IMG], [T(2, 64, 1, 1)], output_size=[1, 1]), "vector"),
    (rec("aten::_adaptive_avg_pool2d_backward", [T(2, 64, 3, 3), IMG], [IMG]), "vector"),
    (rec("aten::im2col", [IMG], [T(2, 576, 196)], kernel_size=[3, 3], padding=[0, 0], stride=[1, 1]), "vector"),
    (rec("aten::col2im", [T(2, 576, 196)], [IMG], kernel_size=[3, 3], padding=[0, 0], stride=[1, 1]), "vector"),
    (rec("aten::unfold_backward", [T(6, 4, 3)], [T(6, 10)], input_sizes=[6, 10], dim=1, size=3, step=2), "vector"),
    (rec("aten::upsample_bilinear2d", [IMG], [T(2, 64, 32, 32)], output_size=[32, 32]), "vector"),
    (rec("aten::upsample_bicubic2d_backward", [T(2, 64, 32, 32)], [IMG], output_size=[32, 32]), "vector"),
    (rec("aten::upsample_nearest2d", [IMG], [T(2, 64, 32, 32)], output_size=[32, 32]), "vector"),
    (rec("aten::reflection_pad2d", [IMG], [T(2, 64, 18, 18)], padding=[1, 1, 1, 1]), "vector"),
    (rec("aten::replication_pad2d_backward", [T(2, 64, 18, 18), IMG], [IMG], padding=[1, 1, 1, 1]), "vector"),
    (rec("aten::pixel_shuffle", [T(2, 64, 8, 8)], [T(2, 16, 16, 16)], upscale_factor=2), "vector"),
    (rec("aten::channel_shuffle", [IMG], [IMG], groups=4), "dma"),
    (rec("aten::select_backward", [T(32, 64)], [T(32, 16, 64)], input_sizes=[32, 16, 64], dim=1, index=3), "dma"),
    (rec("aten::slice_backward", [T(32, 4, 64)], [T(32, 16, 64)], input_sizes=[32, 16, 64], dim=1, start=2,
         end=6, step=1), "dma"),
    (rec("aten::diagonal_backward", [T(64)], [T(64, 64)], input_sizes=[64, 64], offset=0, dim1=0, dim2=1), "gpsimd"),
    (rec("aten::diag_embed", [T(8, 64)], [T(8, 64, 64)]), "gpsimd"),
    (rec("aten::sort", [ROW], [ROW, T(256, 1000, dtype=I64)], dim=1), "vector"),
    (rec("aten::topk", [COLS], [T(8, 50), T(8, 50, dtype=I64)], k=50, dim=-1), "vector"),
    (rec("aten::kthvalue", [ROW], [T(256), T(256, dtype=I64)], k=3, dim=1), "vector"),
    (rec("aten::median", [ROW], [T(256), T(256, dtype=I64)], dim=1), "vector"),
    (rec("aten::searchsorted", [T(1000), T(50_000)], [T(50_000, dtype=I64)]), "gpsimd"),
    (rec("aten::mse_loss", [ROW, ROW], [T()]), "vector"),
    (rec("aten::mse_loss_backward", [T(), ROW, ROW], [ROW], reduction=1), "vector"),
    (rec("aten::binary_cross_entropy_with_logits", [ROW, ROW], [T()]), "scalar"),
    (rec("aten::binary_cross_entropy", [ROW, ROW], [T()]), "scalar"),
    (rec("aten::binary_cross_entropy_backward", [T(), ROW, ROW], [ROW], reduction=1), "vector"),
    (rec("aten::huber_loss", [ROW, ROW], [T()]), "vector"),
    (rec("aten::smooth_l1_loss_backward", [T(), ROW, ROW], [ROW], reduction=1, beta=1.0), "vector"),
    (rec("aten::glu", [T(256, 2000)], [ROW], dim=-1), "scalar"),
    (rec("aten::glu_backward", [ROW, T(256, 2000)], [T(256, 2000)], dim=-1), "vector"),
    (rec("aten::_prelu_kernel", [ROW, T(1, 1)], [ROW]), "vector"),
    (rec("aten::_prelu_kernel_backward", [ROW, ROW, T(1, 1)], [ROW, ROW]), "vector"),
    (rec("aten::log_sigmoid_forward", [ROW], [ROW, ROW]), "scalar"),
    (rec("aten::log_sigmoid_backward", [ROW, ROW, ROW], [ROW]), "scalar"),
    (rec("aten::logical_and_", [ROW, ROW], [ROW]), "vector"),
    (rec("aten::_foreach_addcmul_", PARAMS * 3, [], value=0.1), "vector"),
    (rec("aten::_foreach_sqrt", PARAMS, PARAMS), "scalar"),
    (rec("aten::_foreach_maximum_", PARAMS * 2, []), "vector"),
    (rec("aten::_foreach_abs", PARAMS, PARAMS), "vector"),
    (rec("aten::_foreach_reciprocal_", PARAMS, []), "vector"),
    (rec("aten::_foreach_norm", PARAMS, [T()] * 4, ord=2.0), "scalar"),
    (rec("aten::_fused_adamw_", PARAMS * 4 + [T()] * 4, [], lr=1e-3, amsgrad=False), "vector"),
    (rec("aten::grid_sampler_2d", [IMG, T(2, 8, 8, 2)], [POOLED], interpolation_mode=0), "gpsimd"),
    (rec("aten::grid_sampler_2d_backward", [POOLED, IMG, T(2, 8, 8, 2)], [IMG, T(2, 8, 8, 2)],
         interpolation_mode=0, output_mask=[True, True]), "gpsimd"),
    (rec("aten::_embedding_bag", [T(1000, 64), T(96, dtype=I64), T(8, dtype=I64)],
         [T(8, 64), T(96, dtype=I64), T(8, dtype=I64), T(8, dtype=I64)], mode=1), "gpsimd"),
    (rec("aten::_embedding_bag_backward", [T(8, 64), T(96, dtype=I64), T(8, dtype=I64), T(96, dtype=I64),
                                           T(8, dtype=I64), T(8, dtype=I64)], [T(1000, 64)], num_weights=1000), "dma"),
    (rec("aten::index_fill", [T(64, 64), T(8, dtype=I64), T()], [T(64, 64)], dim=0), "gpsimd"),
    (rec("aten::max_unpool2d", [POOLED, T(2, 64, 8, 8, dtype=I64)], [IMG], output_size=[16, 16]), "gpsimd"),
    (rec("aten::trace", [T(64, 64)], [T()]), "vector"),
    (rec("aten::_cdist_forward", [T(256, 64), T(300, 64)], [T(256, 300)], p=2.0), "tensor"),
    (rec("aten::_cdist_forward", [T(256, 64), T(300, 64)], [T(256, 300)], p=1.0), "vector"),
    (rec("aten::_cdist_backward", [T(256, 300), T(256, 64), T(300, 64), T(256, 300)], [T(256, 64)], p=2.0),
     "tensor"),
]


@pytest.mark.parametrize("record,engine", CASES, ids=[f"{i}-{c[0].name[6:]}" for i, c in enumerate(CASES)])
def test_new_lowerings_run_on_device_and_respect_the_roofline(record, engine):
    program = lower(record, "trn2")
    assert program.kind == "op", record.name
    op = sim(program)
    assert op.busy_ns.get(engine, 0) > 0, (record.name, op.busy_ns)
    assert op.busy_ns.get("host", 0) == 0
    written = sum(o.nbytes for o in record.outputs)
    assert op.hbm_write_bytes >= written
    assert op.time_ns >= op.hbm_bytes / TRN2.dma_bytes_per_s * 1e9
    assert program.info.sbuf_peak_bytes <= TRN2.sbuf_usable_bytes


def test_max_pool_reduces_every_window_element_and_selects_an_index_per_tap():
    out, idx = POOLED, T(2, 64, 8, 8, dtype=I64)
    program = lower(rec("aten::max_pool2d_with_indices", [IMG], [out, idx], kernel_size=[2, 2]))
    assert elements(program, "vector", "tensor_reduce") == out.numel * 4
    assert elements(program, "vector", "select") == out.numel * 4
    op = sim(program)
    assert op.hbm_read_bytes == IMG.nbytes and op.hbm_write_bytes == out.nbytes + idx.nbytes


def test_pool_backward_accumulates_only_when_windows_overlap():
    idx = T(2, 64, 8, 8, dtype=I64)
    tiled = lower(rec("aten::max_pool2d_with_indices_backward", [POOLED, IMG, idx], [IMG], kernel_size=[2, 2]))
    overlapping = lower(rec("aten::max_pool2d_with_indices_backward", [POOLED, IMG, idx], [IMG], kernel_size=[3, 3],
                            stride=[2, 2], padding=[1, 1]))
    assert hw(tiled, "vector", "memset") == 0 and elements(tiled, "vector", "tensor_copy") == POOLED.numel * 4
    assert hw(overlapping, "vector", "memset") > 0
    assert elements(overlapping, "vector", "tensor_tensor") >= POOLED.numel * 9 * 2   # mask * grad, accumulate
    # self (input 1) only gives the shape: grad and indices are read, grad_input written
    op = sim(tiled)
    assert op.hbm_read_bytes == POOLED.nbytes + idx.nbytes and op.hbm_write_bytes == IMG.nbytes


def test_average_divides_by_a_scalar_unless_windows_vary():
    uniform = lower(rec("aten::avg_pool2d", [IMG], [POOLED], kernel_size=[2, 2]))
    uneven = lower(rec("aten::_adaptive_avg_pool2d", [IMG], [T(2, 64, 3, 3)], output_size=[3, 3]))
    assert hw(uniform, "vector", "tensor_scalar") > 0 and hw(uniform, "vector", "tensor_tensor") == 0
    assert hw(uneven, "vector", "tensor_tensor", ("alu", "multiply")) > 0
    # adaptive 16 -> 3 windows are up to ceil(16/3) + 1 = 7 wide
    assert elements(uneven, "vector", "tensor_reduce") == 2 * 64 * 9 * 49
    assert op_flops(rec("aten::_adaptive_avg_pool2d", [IMG], [T(2, 64, 3, 3)])) == 2 * 64 * 9 * 49
    assert op_flops(rec("aten::avg_pool2d", [IMG], [POOLED], kernel_size=[2, 2])) == POOLED.numel * 4


def test_select_backward_zeros_only_the_uncovered_bytes_and_writes_the_slice():
    grad, out = T(32, 64), T(32, 16, 64)
    program = lower(rec("aten::select_backward", [grad], [out], input_sizes=[32, 16, 64], dim=1, index=3))
    op = sim(program)
    assert op.hbm_read_bytes == grad.nbytes and op.hbm_write_bytes == out.nbytes
    dmas = [i for i in program.instructions if i.engine == "dma"]
    assert sorted(i.nbytes for i in dmas) == sorted([grad.nbytes, out.nbytes - grad.nbytes])
    copy = next(i for i in dmas if i.src == "hbm")
    assert copy.descriptors == 32                          # one 256-byte run per outer index
    assert hw(program, "vector", "memset") == 1 and op.busy_ns.get("tensor", 0) == 0


def test_strided_slice_backward_moves_one_run_per_element_row():
    grad, out = T(32, 8, 64), T(32, 16, 64)
    program = lower(rec("aten::slice_backward", [grad], [out], input_sizes=[32, 16, 64], dim=1, start=0, end=16,
                        step=2))
    copy = next(i for i in program.instructions if i.engine == "dma" and i.src == "hbm")
    assert copy.descriptors == 32 * 8


@pytest.mark.parametrize("name,inputs,outputs,attrs,expected", [
    ("aten::_foreach_add_", PARAMS, [], {"scalar": 1.0}, (4, 1)),
    ("aten::_foreach_add_", PARAMS * 2, [], {"alpha": 0.5}, (4, 2)),
    ("aten::_foreach_add_", [T(4), T(4), T(4), T(4)], [], {"scalars": [1.0, 2.0, 3.0, 4.0]}, (4, 1)),
    ("aten::_foreach_mul_", PARAMS + [T()], [], {}, (4, 1)),               # Tensor overload
    ("aten::_foreach_mul_", PARAMS[:3] + [T()], [], {}, (3, 1)),           # ... with an odd list
    ("aten::_foreach_addcmul_", PARAMS * 3, [], {"value": 0.1}, (4, 3)),
    ("aten::_foreach_addcdiv_", PARAMS * 3, [], {"scalars": [1.0] * 4}, (4, 3)),
    ("aten::_foreach_lerp_", PARAMS * 2, [], {"weight": 0.1}, (4, 2)),
    ("aten::_foreach_lerp_", PARAMS * 3, [], {}, (4, 3)),
    ("aten::_foreach_sqrt", PARAMS, PARAMS, {}, (4, 1)),
    ("aten::_foreach_add", PARAMS * 2, PARAMS, {"alpha": 1e-4}, (4, 2)),
    ("aten::_foreach_zero_", [T(8)] * 4, [], {}, (4, 1)),                  # periodic shapes stay one list
])
def test_foreach_list_structure(name, inputs, outputs, attrs, expected):
    assert foreach_lists(name, tuple(inputs), tuple(outputs), attrs) == expected


def test_foreach_counts_work_per_element_of_one_list_and_streams_every_list():
    params = [T(128, 2048)] * 3 + [T(128, 1024)] * 2          # 1024 full 8 KiB tiles... per list: 1,048,576 elements
    numel = sum(p.numel for p in params)
    program = lower(rec("aten::_foreach_addcmul_", params * 3, [], value=0.1))
    assert elements(program, "vector", "tensor_tensor") == 2 * numel     # multiply and add per element
    op = sim(program)
    assert op.hbm_read_bytes == 3 * 4 * numel and op.hbm_write_bytes == 4 * numel
    sqrt = lower(rec("aten::_foreach_sqrt", params, params))
    assert elements(sqrt, "scalar", "activation") == numel
    assert sim(sqrt).hbm_write_bytes == 4 * numel


def test_fused_adamw_reads_four_lists_writes_three():
    params = [T(128, 2048)] * 2
    numel = sum(p.numel for p in params)
    program = lower(rec("aten::_fused_adamw_", params * 4 + [T()] * 2, [], lr=1e-3, amsgrad=False))
    op = sim(program)
    assert op.hbm_read_bytes == 4 * 4 * numel and op.hbm_write_bytes == 3 * 4 * numel
    assert elements(program, "vector", "tensor_tensor") == 5 * numel
    assert elements(program, "scalar", "activation") == numel               # sqrt(v)


def test_max8_costs_n_cycles_without_a_two_byte_speedup():
    for dtype in (F32, "bfloat16"):
        for opcode in ("max8", "match_replace8"):
            ns = instruction_ns(Instruction("vector", opcode, free_size=1000, dtype=dtype), TRN2)
            assert ns == pytest.approx((1000 + TRN2.access_overhead_cycles) / TRN2.vector_clock_hz * 1e9)


def test_topk_runs_ceil_k_over_8_rounds_per_tile():
    program = lower(rec("aten::topk", [ROW], [T(256, 20), T(256, 20, dtype=I64)], k=20, dim=1))
    assert hw(program, "vector", "max8") == 2 * 3 and hw(program, "vector", "match_replace8") == 2 * 3
    assert hw(program, "gpsimd", "local_gather") == 0                       # no second round
    smallest = lower(rec("aten::topk", [ROW], [T(256, 20), T(256, 20, dtype=I64)], k=20, dim=1, largest=False))
    assert hw(smallest, "vector", "tensor_scalar", ("alu", "multiply")) == 2  # negate each tile first


def test_topk_over_a_long_row_splits_it_across_partitions():
    program = lower(rec("aten::topk", [COLS], [T(8, 50), T(8, 50, dtype=I64)], k=50, dim=-1))
    # 8 rows leave 120 partitions idle: each row is cut into 16 pieces, then 16 x 56 candidates remain
    level1 = next(i for i in program.instructions if i.opcode == "max8")
    assert level1.partitions == 128 and level1.free_size == ceil(50257 / 16)
    level2 = [i for i in program.instructions if i.opcode == "max8"][-1]
    assert level2.partitions == 8 and level2.free_size == 16 * 56 and level2.repeat == 7
    assert any(i.engine == "dma" and i.src == "sbuf" and i.dst == "sbuf" for i in program.instructions)


def test_sort_picks_the_cheaper_algorithm_and_declines_rows_that_do_not_fit():
    assert bitonic_stages(1000) == (55, 1024) and bitonic_stages(2) == (1, 2)
    assert sort_stages(8, 8, F32, TRN2)[0].opcode == "max8"                 # one round of selection
    big = sort_stages(4096, 4096, F32, TRN2)
    assert big[0].opcode == "tensor_tensor" and big[0].count == 3 * bitonic_stages(4096)[0]
    assert big[0].free_size == 2048
    long = T(1, 1_000_000)
    assert lower(rec("aten::sort", [long], [long, T(1, 1_000_000, dtype=I64)], dim=-1)).kind == "fallback"
    assert op_flops(rec("aten::sort", [ROW], [ROW], dim=1)) == 256 * 1000 * 10


def test_searchsorted_binary_searches_on_gpsimd():
    m, n = 1000, 50_000
    program = lower(rec("aten::searchsorted", [T(m), T(n)], [T(n, dtype=I64)]))
    per_part = ceil(n / 128)
    tiles = ceil(n / (128 * min(per_part, 4096)))
    assert hw(program, "gpsimd", "local_gather") == tiles * ceil(log2(m + 1))
    assert elements(program, "gpsimd", "local_gather") == 128 * per_part * ceil(log2(m + 1))


def test_reduced_loss_stores_one_scalar_and_sums_across_partitions_on_tensor_engine():
    program = lower(rec("aten::mse_loss", [ROW, ROW], [T()]))
    op = sim(program)
    assert op.hbm_write_bytes == 4 and op.hbm_read_bytes == 2 * ROW.nbytes
    assert hw(program, "scalar", "activation_reduce", ("func", "square")) > 0
    assert hw(program, "tensor", "nc_matmul") == 1
    unreduced = sim(lower(rec("aten::mse_loss", [ROW, ROW], [ROW], reduction=0)))
    assert unreduced.hbm_write_bytes == ROW.nbytes


def test_upsample_passes_cover_each_resized_domain():
    out = T(2, 64, 32, 32)
    nearest = lower(rec("aten::upsample_nearest2d", [IMG], [out], output_size=[32, 32]))
    assert elements(nearest, "vector", "tensor_copy") == out.numel
    back = lower(rec("aten::upsample_nearest2d_backward", [out], [IMG], output_size=[32, 32]))
    assert elements(back, "vector", "tensor_reduce") == out.numel
    bilinear = lower(rec("aten::upsample_bilinear2d", [IMG], [out], output_size=[32, 32]))
    # W pass over [16, 32], H pass over [32, 32] per plane; 2 multiplies and 1 add per element
    assert elements(bilinear, "vector", "tensor_tensor") == 3 * 128 * (16 * 32 + 32 * 32)


def test_autocast_runs_fp32_matmuls_at_the_bf16_rate():
    m = k = n = 1024
    a, b = T(m, k), T(k, n)
    fp32 = lower(rec("aten::mm", [a, b], [T(m, n)]))
    cast = lower(rec("aten::mm", [a, b], [T(m, n)], autocast="bfloat16"))
    bf16 = lower(rec("aten::mm", [T(m, k, dtype="bfloat16"), T(k, n, dtype="bfloat16")], [T(m, n, dtype="bfloat16")]))
    assert {i.dtype for i in cast.instructions if i.engine == "tensor"} == {"bfloat16"}
    op_fp32, op_cast, op_bf16 = sim(fp32), sim(cast), sim(bf16)
    # (the fp32 operands load twice the bytes, so the planner may block the GEMM differently:
    # a few more or fewer transposes, hence not exactly equal)
    assert op_cast.busy_ns["tensor"] == pytest.approx(op_bf16.busy_ns["tensor"], rel=0.02)
    assert op_fp32.busy_ns["tensor"] > 3 * op_cast.busy_ns["tensor"]
    # the operands are still read from HBM as fp32 (the DMA casts on the way into SBUF)
    assert op_cast.hbm_read_bytes >= 4 * (m * k + k * n)
    assert op_cast.hbm_write_bytes == 4 * m * n
    # only matmul-like ops honour it: a column sum's ones-vector matmul stays fp32
    col = [T(4096, 512)]
    plain, marked = (lower(rec("aten::sum", col, [T(512)], dim=[0], **kw)) for kw in ({}, {"autocast": "bfloat16"}))
    assert [i.dtype for i in plain.instructions] == [i.dtype for i in marked.instructions]
    conv = lower(rec("aten::convolution", [T(8, 64, 32, 32), T(128, 64, 3, 3)], [T(8, 128, 32, 32)],
                     stride=[1, 1], padding=[1, 1], groups=1, autocast="bfloat16"))
    assert {i.dtype for i in conv.instructions if i.opcode == "nc_matmul"} == {"bfloat16"}


def test_a_lowering_may_decline_to_the_host_but_only_before_emitting():
    lowering("test::declines")(lambda ctx: False)
    x = T(4)
    assert lower(OpRecord(0, "test::declines", (x,), (x,))).kind == "fallback"

    def emits_then_declines(ctx):
        ctx.builder.compute("vector", "memset", free_size=4)
        return False

    lowering("test::emits_then_declines")(emits_then_declines)
    with pytest.raises(RuntimeError, match="declined after emitting"):
        lower(OpRecord(0, "test::emits_then_declines", (x,), (x,)))


def test_host_only_ops_have_no_lowering():
    assert not HOST_ONLY_OPS & registered_lowerings()
    assert lower(rec("aten::nonzero", [ROW], [T(100, 2, dtype=I64)])).kind == "fallback"


def test_scatter_into_zeros_waits_for_the_zero_fill():
    program = lower(rec("aten::embedding_dense_backward", [T(64, 32), T(64, dtype=I64)], [T(1000, 32)]))
    fill = next(j for j, i in enumerate(program.instructions) if i.engine == "dma" and i.src == "sbuf")
    scatter = next(i for i in program.instructions if i.opcode == "dma_scatter_add")
    assert fill in scatter.deps


def test_coverage_flops_and_min_bytes_are_consistent():
    r = rec("aten::_cdist_forward", [T(256, 64), T(300, 64)], [T(256, 300)], p=2.0)
    assert op_flops(r) == 2 * 256 * 300 * 64
    assert op_min_bytes(r) == (256 * 64 + 300 * 64 + 256 * 300) * 4
