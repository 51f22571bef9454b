"""torch.autocast on the simulated devices follows CUDA's autocast policy, op for op.

Every op of the policy (backend.device.autocast.policy_ops(), which the installed torch's
AutocastCUDA registrations must match) runs under ``torch.autocast("neuron")`` and comes back in
the dtype CUDA's policy gives it: lower_precision_fp ops in bf16, fp32 ops in float32, set_opt_dtype
and append_dtype reductions in float32, promote ops in their widest input type, and the banned
binary_cross_entropy raises.
"""
import contextlib
import warnings

import pytest
import torch
import torch.nn.functional as F

import workbench as wb
from backend.device.autocast import policy_ops
from backend.device.cuda_emulation import disable, emulate_cuda

aten = torch.ops.aten
DEV = "neuron"
BF16, F32 = torch.bfloat16, torch.float32


def f(*shape):
    return torch.randn(*shape, device=DEV)


def b(*shape):
    return torch.randn(*shape, device=DEV, dtype=BF16)


def ones(*shape):
    return torch.ones(*shape, device=DEV)


def longs(*values):
    return torch.tensor(values, device=DEV)


def _up(mode, x, **kw):
    return F.interpolate(x, scale_factor=2, mode=mode, **kw)


CONV = dict(stride=[1, 1], padding=[0, 0], dilation=[1, 1], transposed=False, output_padding=[0, 0], groups=1)
# fp32 inputs: the result comes back in the autocast dtype.
LOWER = {
    "_convolution.deprecated": lambda: aten._convolution.deprecated(f(1, 2, 5, 5), f(3, 2, 3, 3), None, *CONV.values(),
                                                                    False, False, True),
    "_convolution": lambda: aten._convolution(f(1, 2, 5, 5), f(3, 2, 3, 3), None, *CONV.values(), False, False, True,
                                              True),
    "conv1d": lambda: F.conv1d(f(1, 2, 5), f(3, 2, 3)),
    "conv2d": lambda: F.conv2d(f(1, 2, 5, 5), f(3, 2, 3, 3)),
    "conv3d": lambda: F.conv3d(f(1, 2, 4, 4, 4), f(3, 2, 2, 2, 2)),
    "conv_tbc": lambda: torch.conv_tbc(f(5, 1, 2), f(3, 2, 4), f(4)),
    "conv_transpose1d": lambda: F.conv_transpose1d(f(1, 2, 5), f(2, 3, 3)),
    "conv_transpose2d.input": lambda: F.conv_transpose2d(f(1, 2, 5, 5), f(2, 3, 3, 3)),
    "conv_transpose3d.input": lambda: F.conv_transpose3d(f(1, 2, 3, 3, 3), f(2, 3, 2, 2, 2)),
    "convolution": lambda: aten.convolution(f(1, 2, 5, 5), f(3, 2, 3, 3), None, *CONV.values()),
    "prelu": lambda: F.prelu(f(2, 3), f(1)),
    "addmm": lambda: torch.addmm(f(3), f(2, 4), f(4, 3)),
    "addmv": lambda: torch.addmv(f(2), f(2, 4), f(4)),
    "addr": lambda: torch.addr(f(2, 3), f(2), f(3)),
    "matmul": lambda: f(2, 4) @ f(4, 3),
    "einsum": lambda: torch.einsum("ij,jk->ik", f(2, 4), f(4, 3)),
    "mm": lambda: torch.mm(f(2, 4), f(4, 3)),
    "mv": lambda: torch.mv(f(2, 4), f(4)),
    "linalg_vecdot": lambda: torch.linalg.vecdot(f(3, 4), f(3, 4)),
    "linear": lambda: F.linear(f(2, 4), f(3, 4), f(3)),
    "addbmm": lambda: torch.addbmm(f(2, 3), f(5, 2, 4), f(5, 4, 3)),
    "baddbmm": lambda: torch.baddbmm(f(5, 2, 3), f(5, 2, 4), f(5, 4, 3)),
    "bmm": lambda: torch.bmm(f(5, 2, 4), f(5, 4, 3)),
    "chain_matmul": lambda: torch.chain_matmul(f(2, 3), f(3, 4), f(4, 2)),
    "linalg_multi_dot": lambda: torch.linalg.multi_dot([f(2, 3), f(3, 4), f(4, 2)]),
    "lstm_cell": lambda: torch.lstm_cell(f(2, 3), (f(2, 4), f(2, 4)), f(16, 3), f(16, 4))[0],
    "gru_cell": lambda: torch.gru_cell(f(2, 3), f(2, 4), f(12, 3), f(12, 4)),
    "rnn_tanh_cell": lambda: torch.rnn_tanh_cell(f(2, 3), f(2, 4), f(4, 3), f(4, 4)),
    "rnn_relu_cell": lambda: torch.rnn_relu_cell(f(2, 3), f(2, 4), f(4, 3), f(4, 4)),
    "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(f(1, 2, 4, 8), f(1, 2, 4, 8), f(1, 2, 4, 8)),
}
_UNARY_FP32 = ("acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
               "rsqrt", "sinh", "tan")
# bf16 inputs: the result comes back in float32.
FP32 = {
    **{name: (lambda name=name: getattr(torch, name)(b(3))) for name in _UNARY_FP32},
    "pow.Tensor_Scalar": lambda: torch.pow(b(3), 2.0),
    "pow.Tensor_Tensor": lambda: torch.pow(b(3), b(3)),
    "pow.Scalar": lambda: torch.pow(2.0, b(3)),
    "softplus": lambda: F.softplus(b(3)),
    "layer_norm": lambda: F.layer_norm(b(2, 4), (4,)),
    "native_layer_norm": lambda: aten.native_layer_norm(b(2, 4), [4], None, None, 1e-5)[0],
    "rms_norm": lambda: F.rms_norm(b(2, 4), (4,)),
    "group_norm": lambda: F.group_norm(b(2, 4, 3), 2),
    "frobenius_norm.dim": lambda: aten.frobenius_norm.dim(b(2, 3), [1]),
    "nuclear_norm": lambda: aten.nuclear_norm(b(3, 3)),
    "nuclear_norm.dim": lambda: aten.nuclear_norm.dim(b(3, 3), [0, 1]),
    "cosine_similarity": lambda: F.cosine_similarity(b(2, 3), b(2, 3)),
    "poisson_nll_loss": lambda: F.poisson_nll_loss(b(3), b(3)),
    "cosine_embedding_loss": lambda: F.cosine_embedding_loss(b(2, 3), b(2, 3), ones(2)),
    "nll_loss": lambda: F.nll_loss(b(2, 3), longs(0, 2)),
    "nll_loss2d": lambda: F.nll_loss(b(2, 3, 4, 4), torch.zeros(2, 4, 4, dtype=torch.long, device=DEV)),
    "hinge_embedding_loss": lambda: F.hinge_embedding_loss(b(3), ones(3)),
    "kl_div": lambda: F.kl_div(b(3), b(3)),
    "l1_loss": lambda: F.l1_loss(b(3), b(3)),
    "smooth_l1_loss": lambda: F.smooth_l1_loss(b(3), b(3)),
    "huber_loss": lambda: F.huber_loss(b(3), b(3)),
    "mse_loss": lambda: F.mse_loss(b(3), b(3)),
    "margin_ranking_loss": lambda: F.margin_ranking_loss(b(3), b(3), ones(3)),
    "multilabel_margin_loss": lambda: F.multilabel_margin_loss(b(2, 3), torch.tensor([[0, -1, -1], [1, 2, -1]],
                                                                                      device=DEV)),
    "soft_margin_loss": lambda: F.soft_margin_loss(b(3), ones(3)),
    "triplet_margin_loss": lambda: F.triplet_margin_loss(b(2, 3), b(2, 3), b(2, 3)),
    "multi_margin_loss": lambda: F.multi_margin_loss(b(2, 3), longs(0, 2)),
    "binary_cross_entropy_with_logits": lambda: F.binary_cross_entropy_with_logits(b(3), b(3).sigmoid()),
    "dist": lambda: torch.dist(b(3), b(3)),
    "pdist": lambda: F.pdist(b(3, 2)),
    "cdist": lambda: torch.cdist(b(1, 3, 2), b(1, 4, 2)),
    "renorm": lambda: torch.renorm(b(2, 3), 2, 0, 1.0),
    "logsumexp": lambda: torch.logsumexp(b(2, 3), 1),
    "upsample_nearest1d": lambda: _up("nearest", b(1, 1, 4)),
    "_upsample_nearest_exact1d": lambda: _up("nearest-exact", b(1, 1, 4)),
    "upsample_nearest2d": lambda: _up("nearest", b(1, 1, 4, 4)),
    "_upsample_nearest_exact2d": lambda: _up("nearest-exact", b(1, 1, 4, 4)),
    "upsample_nearest3d": lambda: _up("nearest", b(1, 1, 2, 2, 2)),
    "_upsample_nearest_exact3d": lambda: _up("nearest-exact", b(1, 1, 2, 2, 2)),
    "upsample_linear1d": lambda: _up("linear", b(1, 1, 4)),
    "upsample_bilinear2d": lambda: _up("bilinear", b(1, 1, 4, 4)),
    "_upsample_bilinear2d_aa": lambda: _up("bilinear", b(1, 1, 4, 4), antialias=True),
    "upsample_trilinear3d": lambda: _up("trilinear", b(1, 1, 2, 2, 2)),
    "upsample_bicubic2d": lambda: _up("bicubic", b(1, 1, 4, 4)),
    "_upsample_bicubic2d_aa": lambda: _up("bicubic", b(1, 1, 4, 4), antialias=True),
    # fp32_set_opt_dtype: reductions and softmax given dtype=float32
    "prod": lambda: torch.prod(b(3)),
    "prod.dim_int": lambda: torch.prod(b(2, 3), 1),
    "softmax.int": lambda: torch.softmax(b(2, 3), 1),
    "log_softmax.int": lambda: torch.log_softmax(b(2, 3), 1),
    "cumprod": lambda: torch.cumprod(b(3), 0),
    "cumsum": lambda: torch.cumsum(b(3), 0),
    "linalg_vector_norm": lambda: torch.linalg.vector_norm(b(3)),
    "linalg_matrix_norm": lambda: torch.linalg.matrix_norm(b(3, 3), ord=1),
    "linalg_matrix_norm.str_ord": lambda: torch.linalg.matrix_norm(b(3, 3)),
    "sum": lambda: torch.sum(b(3)),
    "sum.dim_IntList": lambda: b(2, 3).sum(1),
    # fp32_append_dtype
    "norm.Scalar": lambda: aten.norm.Scalar(b(3), 2),
    "norm.ScalarOpt_dim": lambda: aten.norm.ScalarOpt_dim(b(2, 3), 2, [1]),
}
# a bf16 and a float32 input: the result comes back in float32
PROMOTE = {
    "addcdiv": lambda: torch.addcdiv(f(3), b(3), b(3)),
    "addcmul": lambda: torch.addcmul(f(3), b(3), b(3)),
    "atan2": lambda: torch.atan2(b(3), f(3)),
    "bilinear": lambda: F.bilinear(b(2, 3), f(2, 4), f(5, 3, 4)),
    "cross": lambda: torch.cross(b(2, 3), f(2, 3), dim=1),
    "dot": lambda: torch.dot(b(3), f(3)),
    "vdot": lambda: torch.vdot(b(3), f(3)),
    "grid_sampler": lambda: F.grid_sample(b(1, 1, 4, 4), f(1, 2, 2, 2), align_corners=False),
    "index_put": lambda: b(3).index_put((longs(0, 2),), f(2)),
    "tensordot": lambda: torch.tensordot(b(2, 3), f(3, 4), dims=1),
    "scatter_add": lambda: torch.scatter_add(b(3), 0, longs(0, 1, 2), f(3)),
}
BANNED = {"binary_cross_entropy": lambda: F.binary_cross_entropy(f(3).sigmoid(), f(3).sigmoid())}
# In the policy, with no sample here: kernels PyTorch has only for CUDA, named-tensor overloads
# (where the installed torch has them).
NOT_SAMPLED = {
    "_thnn_fused_lstm_cell": "CUDA-only kernel", "_thnn_fused_gru_cell": "CUDA-only kernel",
    "_scaled_dot_product_flash_attention": "CUDA-only kernel (CPU runs _for_cpu)",
    "prod.dim_Dimname": "named tensors", "softmax.Dimname": "named tensors", "log_softmax.Dimname": "named tensors",
    "cumprod.dimname": "named tensors", "cumsum.dimname": "named tensors", "sum.dim_DimnameList": "named tensors",
    "norm.names_ScalarOpt_dim": "named tensors",
}
SAMPLES = {**{n: (s, BF16) for n, s in LOWER.items()}, **{n: (s, F32) for n, s in FP32.items()},
           **{n: (s, F32) for n, s in PROMOTE.items()}}


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def test_the_policy_covers_every_op_cuda_autocasts():
    """The installed torch's AutocastCUDA kernels are the policy's ops (CUDA-only cuDNN ops aside)."""
    cuda = {op[len("aten::"):] for op in torch._C._dispatch_get_all_op_names()
            if op.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastCUDA")}
    cuda = {op[:-len(".default")] if op.endswith(".default") else op for op in cuda}
    cuda -= {"cudnn_convolution", "cudnn_convolution_transpose"}
    assert cuda <= set(policy_ops()), sorted(cuda - set(policy_ops()))
    unsampled = set(policy_ops()) - set(SAMPLES) - set(BANNED)
    assert unsampled <= set(NOT_SAMPLED), sorted(unsampled - set(NOT_SAMPLED))
    assert set(SAMPLES) | set(BANNED) <= set(policy_ops())


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_policy_op_returns_cuda_autocast_dtype(name):
    sample, expected = SAMPLES[name]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # chain_matmul is deprecated
        with torch.autocast(DEV, dtype=BF16):
            out = _first(sample())
    assert out.dtype == expected, f"{name} ({policy_ops()[name]}): {out.dtype}"


def test_promote_of_lower_precision_inputs_alone_stays_lower(neuron):
    with torch.autocast(DEV, dtype=BF16):
        assert torch.addcmul(b(3), b(3), b(3)).dtype == BF16


def test_set_opt_dtype_keeps_a_dtype_the_caller_chose(neuron):
    with torch.autocast(DEV, dtype=BF16):
        assert torch.sum(b(3), dtype=BF16).dtype == BF16
        assert torch.softmax(b(2, 3), 1, dtype=torch.float64).dtype == torch.float64
        assert torch.sum(torch.ones(3, dtype=torch.long, device=DEV)).dtype == torch.long


def test_binary_cross_entropy_is_refused_as_on_cuda(neuron):
    with torch.autocast(DEV, dtype=BF16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            BANNED["binary_cross_entropy"]()
    assert BANNED["binary_cross_entropy"]().dtype == F32          # fine outside autocast


@contextlib.contextmanager
def _device(kind):
    if kind == "cuda":
        with emulate_cuda("h100"):
            yield "cuda"
        disable()
    else:
        yield "neuron"


@pytest.mark.parametrize("kind", ["neuron", "cuda"])
def test_attention_with_fp32_query_key_and_bf16_value_runs_in_bf16(neuron, kind):
    """The RoPE pattern: q and k come back from rotary embedding in float32, v is bf16. CPU
    autocast and CUDA autocast return bf16; the profile times the attention at bf16."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16).to(BF16)
    with torch.autocast("cpu", dtype=BF16):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with _device(kind) as dev:
        with wb.profile(device=kind) as prof, torch.autocast(dev, dtype=BF16):
            out = F.scaled_dot_product_attention(q.to(dev), k.to(dev), v.to(dev), is_causal=True)
        assert out.dtype == BF16
        torch.testing.assert_close(out.cpu(), ref, atol=2e-2, rtol=2e-2)
    attention = prof.ops[prof.ops["name"].str.contains("attention")]
    assert len(attention)
