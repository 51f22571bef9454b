import pytest

from backend.sim.flops import (
    base_name, flop_formula, is_matmul_like, op_flops, op_min_bytes, storage_bytes,
)
from backend.sim.descriptors import OpRecord, TensorDesc


def T(*shape, dtype="float32", strides=None):
    return TensorDesc(tuple(shape), dtype, strides)


def rec(name, inputs, outputs, **attrs):
    return OpRecord(0, name, tuple(inputs), tuple(outputs), attrs)


def test_mm_family():
    assert op_flops(rec("aten::mm", [T(4, 8), T(8, 16)], [T(4, 16)])) == 2 * 4 * 8 * 16
    assert op_flops(rec("aten::addmm", [T(16), T(4, 8), T(8, 16)], [T(4, 16)])) == 2 * 4 * 8 * 16
    assert op_flops(rec("aten::bmm", [T(3, 4, 8), T(3, 8, 16)], [T(3, 4, 16)])) == 2 * 3 * 4 * 8 * 16
    assert op_flops(rec("aten::baddbmm", [T(3, 4, 16), T(3, 4, 8), T(3, 8, 16)], [T(3, 4, 16)])) == 2 * 3 * 4 * 8 * 16
    assert op_flops(rec("aten::linear", [T(2, 5, 8), T(16, 8), T(16)], [T(2, 5, 16)])) == 2 * 10 * 8 * 16
    assert op_flops(rec("aten::addbmm", [T(4, 16), T(3, 4, 8), T(3, 8, 16)], [T(4, 16)])) == 2 * 3 * 4 * 8 * 16


def test_conv_matches_torch_formula():
    # 3x3 conv, N=2, Cin=3, Cout=8, 8x8 -> 8x8 (padding 1)
    r = rec("aten::convolution", [T(2, 3, 8, 8), T(8, 3, 3, 3)], [T(2, 8, 8, 8)],
            stride=[1, 1], padding=[1, 1], dilation=[1, 1], transposed=False, groups=1)
    fwd = 2 * 64 * 9 * 2 * 8 * 3
    assert op_flops(r) == fwd
    bwd = rec("aten::convolution_backward", [T(2, 8, 8, 8), T(2, 3, 8, 8), T(8, 3, 3, 3)],
              [T(2, 3, 8, 8), T(8, 3, 3, 3)], transposed=False, output_mask=[True, True, False])
    assert op_flops(bwd) == 2 * fwd
    bwd.attrs["output_mask"] = [False, True, False]
    assert op_flops(bwd) == fwd


def test_sdpa():
    q = T(2, 4, 16, 8)
    r = rec("aten::_scaled_dot_product_flash_attention_for_cpu", [q, q, q], [q])
    assert op_flops(r) == 4 * 2 * 4 * 16 * 16 * 8
    b = rec("aten::_scaled_dot_product_flash_attention_for_cpu_backward", [q, q, q, q, q], [q, q, q])
    assert op_flops(b) == 2 * op_flops(r)


def test_elementwise_and_views():
    x = T(10, 10)
    assert op_flops(rec("aten::add", [x, x], [x])) == 100
    assert op_flops(rec("aten::gelu", [x], [x])) == 500
    assert op_flops(rec("aten::sum", [x], [T(10)], dim=[1], keepdim=False)) == 100
    assert op_flops(rec("aten::_softmax", [x], [x], dim=-1)) == 500
    view = OpRecord(0, "aten::view", (x,), (x,), is_view=True)
    assert op_flops(view) == 0 and op_min_bytes(view) == 0
    assert op_flops(rec("aten::embedding", [T(50, 10), T(4, dtype="int64")], [T(4, 10)])) == 0


def test_matmul_like_and_names():
    assert is_matmul_like("aten::mm") and is_matmul_like("aten::addmm.default")
    assert is_matmul_like("convolution") and not is_matmul_like("aten::add")
    assert base_name("aten::add.Tensor") == "aten::add"


def test_min_bytes_counts_broadcast_once():
    bias = T(4, 16, strides=(0, 1))
    assert storage_bytes(bias) == 64
    r = rec("aten::add", [T(4, 16), bias], [T(4, 16)])
    assert op_min_bytes(r) == 256 + 64 + 256


def test_duplicate_registration_rejected():
    with pytest.raises(ValueError, match="duplicate"):
        flop_formula("aten::mm")(lambda r: 0)
