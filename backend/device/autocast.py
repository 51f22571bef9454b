"""``torch.autocast`` for the simulated devices: the autocast policy of AutocastPrivateUse1.

PyTorch registers no autocast kernels for AutocastPrivateUse1, so ``torch.autocast("neuron")``
(and emulated ``torch.autocast("cuda")``, whose tensors are PrivateUse1 tensors) would reach
no policy. :func:`register` gives that key CUDA's autocast policy once per process: matmul/conv
ops run in the autocast dtype (``torch.get_autocast_dtype("neuron")``), precision-sensitive
ops in float32, everything else falls through unchanged. Casts are ordinary differentiable
``.to`` calls, so gradients come back in each input's dtype, as on CUDA.
"""
from __future__ import annotations

import torch

__all__ = ["register", "is_registered", "LOWER_PRECISION_OPS", "FP32_OPS"]

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


class AutocastPolicy:
    """The libraries holding the AutocastPrivateUse1 kernels (registered once per process)."""

    def __init__(self) -> None:
        self.libraries: tuple = ()

    def register(self, device_type: str) -> None:
        if self.libraries:
            return
        fallthrough = torch.library.Library("_", "IMPL")
        fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
        policy = torch.library.Library("aten", "IMPL")
        lower = lambda: torch.get_autocast_dtype(device_type)  # noqa: E731  (read at call time)
        fp32 = lambda: torch.float32  # noqa: E731
        for names, dtype_of in ((LOWER_PRECISION_OPS, lower), (FP32_OPS, fp32)):
            for name in names:
                policy.impl(name, _kernel(_overload(name), dtype_of), _KEY)
        self.libraries = (fallthrough, policy)

    def reset(self) -> None:
        """Remove the kernels (tests); ``register`` puts them back."""
        for library in self.libraries:
            library._destroy()
        self.libraries = ()


POLICY = AutocastPolicy()


def register(device_type: str) -> None:
    """Give AutocastPrivateUse1 the autocast policy, casting to ``device_type``'s autocast dtype."""
    POLICY.register(device_type)


def is_registered() -> bool:
    return bool(POLICY.libraries)
