"""``torch.autocast("cuda")`` for tensors whose C++ device is the neuron device.

Emulated CUDA tensors are PrivateUse1 tensors, so CUDA's autocast (the AutocastCUDA dispatch
key) never sees them, and PyTorch registers no autocast kernels for AutocastPrivateUse1. While
emulation is on we (1) send ``autocast(device_type="cuda")`` to the backing device type and
(2) register CUDA's autocast policy on AutocastPrivateUse1: matmul/conv ops run in the autocast
dtype, precision-sensitive ops in float32, everything else falls through unchanged. Casts are
ordinary differentiable ``.to`` calls, so gradients come back in each input's dtype, as on CUDA.
"""
from __future__ import annotations

import torch

from ..patching import Patcher

__all__ = ["install", "LOWER_PRECISION_OPS", "FP32_OPS"]

_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

# From aten/src/ATen/autocast_mode.cpp (CUDA lists), at the aten level the device reaches
# (composites such as linear and matmul decompose into these before autocast sees them).
LOWER_PRECISION_OPS = (
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "addr", "convolution",
    "_convolution", "prelu", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell",
)
FP32_OPS = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "pow.Scalar", "softplus", "native_layer_norm", "native_group_norm", "norm.Scalar",
    "norm.ScalarOpt_dim", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss",
    "nll_loss_forward", "nll_loss2d_forward", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss_forward",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "_softmax", "_log_softmax", "cumsum", "cumprod", "prod", "sum", "sum.dim_IntList",
)


def _cast(value, dtype):
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.dtype != torch.float64 and value.dtype != dtype:
            return value.to(dtype)
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _kernel(op, dtype_of):
    def run(*args, **kwargs):
        dtype = dtype_of()
        args = [_cast(a, dtype) for a in args]
        kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)
    return run


def _overload(name: str):
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _register(backing_type: str) -> tuple:
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
    policy = torch.library.Library("aten", "IMPL")
    lower = lambda: torch.get_autocast_dtype(backing_type)  # noqa: E731  (read at call time)
    fp32 = lambda: torch.float32  # noqa: E731
    for names, dtype_of in ((LOWER_PRECISION_OPS, lower), (FP32_OPS, fp32)):
        for name in names:
            policy.impl(name, _kernel(_overload(name), dtype_of), _KEY)
    return fallthrough, policy


def install(patcher: Patcher, backing_type: str) -> None:
    """Map autocast("cuda") to ``backing_type`` and give that key CUDA's autocast policy."""
    for library in _register(backing_type):
        patcher.on_restore(f"aten {_KEY} autocast kernels", library._destroy)

    device_module = getattr(torch, backing_type)
    if not hasattr(device_module, "get_amp_supported_dtype"):
        patcher.setattr(device_module, "get_amp_supported_dtype",
                        lambda: [torch.float16, torch.bfloat16])

    autocast = torch.amp.autocast_mode.autocast
    original_init = vars(autocast)["__init__"]

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type == "cuda":
            device_type = backing_type
        original_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    __init__.__doc__ = original_init.__doc__
    patcher.setattr(autocast, "__init__", __init__)
