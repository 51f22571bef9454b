"""Convolution lowering: implicit GEMMs on TensorE, depthwise on VectorE, backward products, bounds."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.lowering import lower, lower_kernel, op_flops, op_min_bytes
from backend.lowering.builder import Builder, OpContext
from backend.lowering.conv import conv_products, window_product
from backend.lowering.conv.tensor_engine import tap_packings
from backend.lowering.conv.vector_engine import vector_window
from backend.sim import OpRecord, Program, Simulator, TensorDesc, get_target

TRN2 = get_target("trn2")


def T(*shape, dtype="float32"):
    return TensorDesc(tuple(shape), dtype)


def conv(n, c_in, c_out, side, k, *, stride=1, groups=1, dtype="float32", bias=True, transposed=False):
    """A forward conv record with 'same' padding (or its ConvTranspose2d counterpart)."""
    pad = k // 2
    if transposed:
        out_side = (side - 1) * stride - 2 * pad + k
        w = T(c_in, c_out // groups, k, k, dtype=dtype)
    else:
        out_side = (side + 2 * pad - k) // stride + 1
        w = T(c_out, c_in // groups, k, k, dtype=dtype)
    inputs = (T(n, c_in, side, side, dtype=dtype), w) + ((T(c_out, dtype=dtype),) if bias else ())
    return OpRecord(0, "aten::convolution", inputs, (T(n, c_out, out_side, out_side, dtype=dtype),),
                    dict(stride=[stride] * 2, padding=[pad] * 2, dilation=[1, 1], transposed=transposed,
                         output_padding=[0, 0], groups=groups))


def backward(fwd, mask=(True, True, True)):
    """The convolution_backward record of a forward record; outputs list only the masked-in gradients."""
    x, w = fwd.inputs[:2]
    grads = (x, w, T(fwd.outputs[0].shape[1], dtype=x.dtype))
    return OpRecord(0, "aten::convolution_backward", (fwd.outputs[0], x, w),
                    tuple(g for g, m in zip(grads, mask) if m), dict(fwd.attrs, output_mask=list(mask)))


def run(record, target=TRN2):
    return Simulator(target).run(lower(record, target)).ops[0]


def floor_ns(record, target=TRN2):
    """Roofline floor: FLOPs at TensorE's peak for the dtype, or the op's minimum HBM bytes."""
    rate = target.peak_flops_per_s * (target.fp32_matmul_rate if record.inputs[0].dtype == "float32" else 1)
    return max(op_flops(record) / rate, op_min_bytes(record) / target.hbm_bytes_per_s) * 1e9


def compute_engines(op):
    return {k: v for k, v in op.busy_ns.items() if k != "dma"}


def ctx_for(record):
    return OpContext(record, TRN2, Builder(Program(record.name), TRN2))


def test_tap_packings_trade_input_copies_for_fewer_k_tiles():
    # 64 channels: 9 half-full K tiles, 2 copies (dx pairs: 3 rows x 2), or the full im2col (576 rows)
    assert tap_packings(64, (3, 3), 128) == [(9, 64), (6, 128), (5, 576)]
    # 3 channels: the whole 3x3 window fits one K tile of 27 rows
    assert tap_packings(3, (3, 3), 128)[-1] == (1, 27)
    # 128 channels or more: a K tile per 128 channels per tap, no copies
    assert tap_packings(256, (3, 3), 128) == [(18, 256)]


def test_strided_grad_input_splits_into_phases_without_zeros():
    fwd = conv(2, 8, 8, 16, 3, stride=2)
    p = window_product(*fwd.inputs[:2], fwd.outputs[0], fwd.attrs, grad_input=True, src=0, weight=2, out=0)
    kernels, unreached = p.phases()
    # 3 taps over stride 2 split 2 + 1 per dim; every one of the 16x16 input positions is reached once
    assert kernels == {(2, 2): 2 * 64, (2, 1): 2 * 64, (1, 2): 2 * 64, (1, 1): 2 * 64} and unreached == 0
    assert sum(a * b * px for (a, b), px in kernels.items()) == 2 * 8 * 8 * 9   # = grad_out pixels x taps
    one = conv(2, 8, 8, 16, 1, stride=2)
    _, unreached = window_product(*one.inputs[:2], one.outputs[0], one.attrs, grad_input=True, src=0, weight=2,
                                  out=0).phases()
    assert unreached == 2 * 16 * 16 * 3 // 4       # a 1x1 stride-2 conv never touches 3/4 of the input


@pytest.mark.parametrize("dtype,c", [("float32", 64), ("bfloat16", 128), ("bfloat16", 256)])
def test_large_dense_conv_is_within_3x_of_its_roofline(dtype, c):
    side = 56 if c < 256 else 28
    record = conv(8, c, c, side, 3, dtype=dtype)
    op = run(record)
    assert floor_ns(record) <= op.time_ns <= 3 * floor_ns(record)
    engines = compute_engines(op)
    assert max(engines, key=engines.get) == "tensor"
    # the input crosses HBM once (tap copies are one broadcast load); weights and bias are small
    assert op.hbm_read_bytes < 1.2 * sum(t.nbytes for t in record.inputs)
    assert record.outputs[0].nbytes <= op.hbm_write_bytes < 1.05 * record.outputs[0].nbytes


@pytest.mark.parametrize("stride,channels", [(1, 3), (1, 64), (2, 64)])
def test_convolution_as_implicit_gemm(stride, channels):
    x = T(8, channels, 32, 32, dtype="bfloat16")
    record = conv(8, channels, 128, 32, 3, stride=stride, dtype="bfloat16")
    op = run(record)
    assert op.time_ns >= op_flops(record) / TRN2.peak_flops_per_s * 1e9
    assert op.hbm_bytes >= op_min_bytes(record)
    # the input crosses HBM about once, not once per filter tap
    assert op.hbm_read_bytes < 3 * (x.nbytes + record.inputs[1].nbytes)
    matmuls = sum(i.repeat for i in lower(record).instructions if i.opcode == "nc_matmul")
    tiles = 8 * (32 // stride) ** 2 // 512           # moving tiles of 512 output pixels
    if channels == 3:       # the whole 27-row window is one K tile: evacuating the outputs is the bound
        assert matmuls == tiles
    else:                   # at most a K tile per tap, and TensorE is the busiest engine
        engines = compute_engines(op)
        assert tiles * 5 <= matmuls <= tiles * 9 and max(engines, key=engines.get) == "tensor"


def test_depthwise_7x7_maps_to_vector_engine_and_the_planner_takes_the_faster_mapping():
    record = conv(1, 64, 64, 28, 7, groups=64)
    ctx = ctx_for(record)
    window = conv_products(ctx)[0][0]
    vector_window(ctx, window)(ctx)
    vector = Simulator(TRN2).run(ctx.builder.program).ops[0]
    assert set(compute_engines(vector)) == {"vector"}
    # VectorE floor: 64 x 784 outputs x 49 taps multiply-accumulates over 128 lanes at 2 cycles each (fp32)
    vector_floor_ns = 64 * 784 * 49 * 2 / TRN2.partitions / TRN2.vector_clock_hz * 1e9
    assert vector_floor_ns <= vector.time_ns < 50_000
    # fp32 block-diagonal TensorE (a quarter of the bf16 rate) is within a few percent of it here;
    # the planner takes whichever simulates faster
    assert run(record).time_ns <= vector.time_ns
    program = ctx.builder.program
    macs = [i for i in program.instructions if i.engine == "vector" and i.opcode == "tensor_tensor"]
    # channels x two bands of 14 rows fill the 128 partitions: one tap per instruction, the first a tensor_scalar
    assert sum(i.repeat for i in macs) == 48 and {(i.partitions, i.free_size) for i in macs} == {(128, 392)}


def test_depthwise_in_bf16_may_take_tensor_engine_diagonal_weights():
    # bf16 TensorE is 4x its fp32 rate: block-diagonal weights beat VectorE at batch 8
    op = run(conv(8, 64, 64, 28, 7, groups=64, dtype="bfloat16"))
    engines = compute_engines(op)
    assert max(engines, key=engines.get) == "tensor"
    assert op.time_ns < 120_000


def test_grouped_conv_packs_groups_block_diagonally():
    record = conv(8, 64, 64, 28, 3, groups=8, dtype="bfloat16")
    program = lower(record)
    matmuls = [i for i in program.instructions if i.opcode == "nc_matmul"]
    # all 8 groups of 8 output channels share one matmul: 64 stationary columns, not 8
    assert {i.stationary_free for i in matmuls} == {64}
    op = run(record)
    # the block-diagonal weights' zeros never cross HBM
    assert op.hbm_read_bytes < 1.2 * sum(t.nbytes for t in record.inputs)


def test_bias_is_one_value_per_output_partition():
    record = conv(8, 64, 256, 56, 1)
    op = run(record)
    assert op.hbm_read_bytes < 1.1 * sum(t.nbytes for t in record.inputs)
    assert floor_ns(record) <= op.time_ns <= 2 * floor_ns(record)


@pytest.mark.parametrize("fwd,engine", [
    (conv(8, 64, 64, 56, 3, dtype="bfloat16"), "tensor"),
    (conv(8, 64, 128, 56, 3, stride=2, dtype="bfloat16"), "tensor"),
    (conv(8, 64, 256, 56, 1, dtype="bfloat16"), "tensor"),
    (conv(1, 64, 64, 28, 7, groups=64), "vector"),
])
def test_backward_products_run_on_the_expected_engines(fwd, engine):
    record = backward(fwd)
    op = run(record)
    engines = compute_engines(op)
    assert max(engines, key=engines.get) == engine
    assert op.time_ns >= floor_ns(record)
    assert op.hbm_write_bytes >= sum(t.nbytes for t in record.outputs)
    windows, kernel_grad, bias = conv_products(ctx_for(record))
    assert len(windows) == 1 and kernel_grad is not None and kernel_grad.bias == 2 and bias is None


def test_dense_backward_matmuls_do_no_zero_work():
    fwd = conv(8, 64, 128, 56, 3, stride=2, dtype="bfloat16")
    record = backward(fwd, (True, False, False))
    op = run(record)
    # grad_input by phases: TensorE multiplies about the useful FLOPs (K tiles are not all full), not 4x
    assert op_flops(record) <= op.hardware_flops < 1.5 * op_flops(record)


def test_backward_outputs_follow_the_mask():
    fwd = conv(2, 16, 32, 16, 3)
    weight_and_bias = run(backward(fwd, (False, True, True)))
    assert weight_and_bias.hbm_write_bytes == fwd.inputs[1].nbytes + fwd.inputs[2].nbytes
    input_only = run(backward(fwd, (True, False, False)))
    assert input_only.hbm_write_bytes == fwd.inputs[0].nbytes


def test_transposed_conv_costs_like_the_grad_input_it_mirrors():
    up = conv(4, 64, 32, 16, 3, stride=2, transposed=True, bias=False, dtype="bfloat16")
    down = conv(4, 32, 64, up.outputs[0].shape[-1], 3, stride=2, bias=False, dtype="bfloat16")
    grad_input = backward(down, (True, False, False))
    up_op, grad_op = run(up), run(grad_input)
    assert up_op.hardware_flops == grad_op.hardware_flops
    assert up_op.time_ns == pytest.approx(grad_op.time_ns, rel=0.1)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 4), c=st.sampled_from([3, 16, 64, 160]), side=st.integers(4, 24),
       k=st.sampled_from([1, 3, 5]), depthwise=st.booleans(), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_time_is_monotone_in_batch_and_side(n, c, side, k, depthwise, dtype):
    groups = c if depthwise else 1
    base = run(conv(n, c, c, side, k, groups=groups, dtype=dtype)).time_ns
    assert run(conv(2 * n, c, c, side, k, groups=groups, dtype=dtype)).time_ns >= base
    assert run(conv(n, c, c, 2 * side, k, groups=groups, dtype=dtype)).time_ns >= base
    assert run(backward(conv(2 * n, c, c, side, k, groups=groups, dtype=dtype))).time_ns >= \
        run(backward(conv(n, c, c, side, k, groups=groups, dtype=dtype))).time_ns


def test_fused_backward_reads_grad_out_from_sbuf():
    fwd = conv(8, 64, 64, 28, 3, dtype="bfloat16")
    g = fwd.outputs[0]
    relu_grad = OpRecord(0, "aten::threshold_backward", (g, g), (g,), {"threshold": 0})
    kernel = lower_kernel("relu_conv_backward", [relu_grad, backward(fwd)], links={(1, 0): (0, 0)})
    fused = Simulator(TRN2).run(kernel).ops[0]
    x, w = fwd.inputs[:2]
    # grad_out never goes back to HBM: what is read is the relu's two inputs, x (with its halo rows) and w
    assert 2 * g.nbytes + x.nbytes + w.nbytes <= fused.hbm_read_bytes < 2 * g.nbytes + 1.2 * (x.nbytes + w.nbytes)
    assert fused.time_ns < run(relu_grad).time_ns + run(backward(fwd)).time_ns
