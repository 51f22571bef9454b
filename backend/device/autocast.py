"""``torch.autocast`` for the simulated devices: the autocast policy of AutocastPrivateUse1.

PyTorch registers no autocast kernels for AutocastPrivateUse1, so ``torch.autocast("neuron")``
(and emulated ``torch.autocast("cuda")``, whose tensors are PrivateUse1 tensors) would reach
no policy. :func:`register` gives that key CUDA's autocast policy once per process, list for
list: matmul/conv/attention ops run in the autocast dtype (``torch.get_autocast_dtype("neuron")``),
precision-sensitive ops in float32 (by casting, or by passing ``dtype=float32`` to reductions
and softmax), mixed-dtype ops in their widest input type, ``binary_cross_entropy`` is refused,
everything else falls through unchanged. Casts are ordinary differentiable ``.to`` calls, so
gradients come back in each input's dtype, as on CUDA.
"""
from __future__ import annotations

import torch

__all__ = ["register", "is_registered", "LOWER_PRECISION_OPS", "FP32_OPS", "FP32_SET_OPT_DTYPE_OPS",
           "FP32_APPEND_DTYPE_OPS", "PROMOTE_OPS", "BANNED_OPS", "policy_ops"]

_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

# CUDA's lists, as aten/src/ATen/autocast_mode.h names them (AT_FORALL_LOWER_PRECISION_FP,
# AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE,
# AT_FORALL_PROMOTE, the banned binary_cross_entropy). Composites (linear, matmul, sdpa, layer_norm)
# are listed as CUDA lists them: autocast sees them before they decompose. Overloads the installed
# torch lacks are skipped at registration.
LOWER_PRECISION_OPS = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr",
    "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul",
    "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)
FP32_OPS = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
    "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
# Run in float32 by passing dtype=float32, unless the caller chose a dtype.
FP32_SET_OPT_DTYPE_OPS = (
    "prod", "prod.dim_int", "prod.dim_Dimname", "softmax.int", "softmax.Dimname", "log_softmax.int",
    "log_softmax.Dimname", "cumprod", "cumprod.dimname", "cumsum", "cumsum.dimname", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList", "sum.dim_DimnameList",
)
# norm overload -> the overload with a dtype that it is redispatched to.
FP32_APPEND_DTYPE_OPS = {
    "norm.Scalar": "norm.ScalarOpt_dtype", "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "norm.names_ScalarOpt_dim_dtype",
}
# Run in the widest floating type among the inputs.
PROMOTE_OPS = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
               "tensordot", "scatter_add")
BANNED_OPS = {
    "binary_cross_entropy": (
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
        "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
        "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
        "safe to autocast."),
}


def _eligible(value) -> bool:
    """A tensor autocast casts: floating, not float64, on the autocast device (as CUDA's
    ``is_eligible``: CPU tensors, e.g. 0-dim scalars, are left alone)."""
    return (isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64
            and value.device.type not in ("cpu", "meta"))


def _cast(value, dtype):
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if _eligible(value) and value.dtype != dtype else value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _tensors(args, kwargs):
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def _first_tensor(args):
    return next((a for a in args if isinstance(a, torch.Tensor)), None)


def _casting(op, dtype_of):
    """lower_precision_fp / fp32: every eligible tensor cast to ``dtype_of(args, kwargs)``."""
    def run(*args, **kwargs):
        dtype = dtype_of(args, kwargs)
        args = [_cast(a, dtype) for a in args]
        kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)
    return run


def _set_opt_dtype(op):
    """fp32_set_opt_dtype: an eligible first input runs with dtype=float32 unless one was given."""
    position = [a.name for a in op._schema.arguments].index("dtype")
    keyword = op._schema.arguments[position].kwarg_only

    def run(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if _eligible(_first_tensor(args)):
                if keyword or len(args) <= position:
                    if kwargs.get("dtype") is None:
                        kwargs = {**kwargs, "dtype": torch.float32}
                elif args[position] is None:
                    args = (*args[:position], torch.float32, *args[position + 1:])
            return op(*args, **kwargs)
    return run


def _append_dtype(op, with_dtype):
    """fp32_append_dtype: an eligible first input runs the overload that takes dtype=float32."""
    parameters = [a for a in op._schema.arguments if not a.kwarg_only]

    def run(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if not _eligible(_first_tensor(args)):
                return op(*args, **kwargs)
            # The dtype overload has no defaults: pass every parameter.
            full = [*args, *(kwargs.get(a.name, a.default_value) for a in parameters[len(args):])]
            return with_dtype(*full, dtype=torch.float32)
    return run


def _banned(message):
    def run(*args, **kwargs):
        raise RuntimeError(message)
    return run


def _overload(name: str):
    """The aten overload ``name`` names, or None where the installed torch lacks it."""
    packet, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, packet, None)
    if packet is None or (overload or "default") not in packet.overloads():
        return None
    return getattr(packet, overload or "default")


def policy_ops() -> dict[str, str]:
    """Each overload of the installed torch that the policy covers -> its policy name."""
    lists = {"lower_precision_fp": LOWER_PRECISION_OPS, "fp32": FP32_OPS,
             "fp32_set_opt_dtype": FP32_SET_OPT_DTYPE_OPS, "fp32_append_dtype": tuple(FP32_APPEND_DTYPE_OPS),
             "promote": PROMOTE_OPS, "banned": tuple(BANNED_OPS)}
    return {name: policy for policy, names in lists.items() for name in names if _overload(name) is not None}


def _promoted(lower_dtype):
    def dtype_of(args, kwargs):
        dtypes = {t.dtype for t in _tensors(args, kwargs) if _eligible(t)}
        return torch.float32 if torch.float32 in dtypes else lower_dtype()
    return dtype_of


def _kernel(name: str, policy: str, device_type: str):
    op = _overload(name)
    lower = lambda: torch.get_autocast_dtype(device_type)  # noqa: E731  (read at call time)
    if policy == "lower_precision_fp":
        return _casting(op, lambda args, kwargs: lower())
    if policy == "fp32":
        return _casting(op, lambda args, kwargs: torch.float32)
    if policy == "fp32_set_opt_dtype":
        return _set_opt_dtype(op)
    if policy == "fp32_append_dtype":
        return _append_dtype(op, _overload(FP32_APPEND_DTYPE_OPS[name]))
    if policy == "promote":
        return _casting(op, _promoted(lower))
    return _banned(BANNED_OPS[name])


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
        for name, kind in policy_ops().items():
            policy.impl(name, _kernel(name, kind, device_type), _KEY)
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
