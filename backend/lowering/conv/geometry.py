"""Convolution geometry: the products a conv record computes and their window arithmetic.

A forward conv is one window product; its backward is up to three more: grad_input (a
window product of grad_out with the flipped kernel), grad_weight (a kernel gradient, a GEMM
over output pixels) and grad_bias (a sum over pixels). This module reads them off the record
(groups, channels, kernel, stride, dilation, padding) and does the index arithmetic the
mappings share: a strided window product that scatters (grad_input of a strided conv, a
ConvTranspose forward) splits into stride^d phases, each a stride-1 gather with a sub-kernel,
and a band of output rows reads the halo rows its windows reach past it. Nothing here emits
instructions.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import product
from math import prod

from backend.lowering.builder import OpContext
from backend.sim.descriptors import TensorDesc

__all__ = ["WindowProduct", "KernelGradient", "window_product", "conv_products", "halo_rows"]


@dataclass(frozen=True)
class WindowProduct:
    """dst[n, g, cd, o] = sum over cs < src_ch and taps j of w[g, cd, cs, j] * src[n, g, cs, i].

    Gather (``scatter`` False): o runs over dst, i = o*stride + j*dilation - padding.
    Scatter (True): i runs over src, o = i*stride + j*dilation - padding (a transposed conv).
    Operands are record positions; ``weight_k_contiguous``: the contracted channels are the
    weight's dim 1, so its K (channels x taps) is contiguous in memory.
    """

    src: int
    weight: int
    out: int
    bias: int | None
    batch: int
    groups: int
    src_ch: int
    dst_ch: int
    kernel: tuple
    stride: tuple
    dilation: tuple
    padding: tuple
    src_spatial: tuple
    dst_spatial: tuple
    scatter: bool
    weight_k_contiguous: bool

    @property
    def taps(self) -> int:
        return prod(self.kernel)

    def phases(self) -> tuple[dict, int]:
        """Stride-1 gathers this product is made of: ({sub-kernel: dst positions}, positions no tap reaches).

        Along a dim with stride s, output o receives tap j iff (o + padding - j*dilation) % s == 0,
        so the outputs of one residue class share one sub-kernel."""
        if not self.scatter:
            return {self.kernel: self.batch * prod(self.dst_spatial)}, 0
        per_dim = []
        for k, s, d, p, size in zip(self.kernel, self.stride, self.dilation, self.padding, self.dst_spatial):
            per_dim.append([(sum(1 for j in range(k) if (j * d) % s == r),
                             sum(1 for o in range(size) if (o + p) % s == r)) for r in range(s)])
        kernels: dict = defaultdict(int)
        unreached = 0
        for combo in product(*per_dim):
            sub = tuple(taps for taps, _ in combo)
            positions = self.batch * prod(count for _, count in combo)
            if min(sub) == 0:
                unreached += positions
            elif positions:
                kernels[sub] += positions
        return dict(kernels), unreached


@dataclass(frozen=True)
class KernelGradient:
    """dw[g, cs, cb, j] = sum over n, o of small[n, g, cs, o] * big[n, g, cb, o*stride + j*dilation - padding].

    For a conv, small is grad_out and big the input; for a transposed conv the other way round.
    """

    small: int
    big: int
    out: int
    bias: int | None          # grad_bias computed alongside (the sum of grad_out), or None
    batch: int
    groups: int
    small_ch: int
    big_ch: int
    kernel: tuple
    stride: tuple
    dilation: tuple
    small_spatial: tuple
    big_spatial: tuple

    @property
    def taps(self) -> int:
        return prod(self.kernel)


def _per_dim(value, nd: int, default: int) -> tuple:
    if value is None or isinstance(value, str) or value == [] or value == ():
        return (default,) * nd     # padding="same"/"valid": only the phases' residues would shift
    value = [value] if isinstance(value, int) else list(value)
    return tuple(value * nd if len(value) == 1 else value[-nd:])


def _geometry(x: TensorDesc, w: TensorDesc, attrs: dict) -> tuple:
    """(groups, c_in per group, c_out per group, kernel, stride, dilation, padding, transposed)."""
    groups = int(attrs.get("groups", 1) or 1)
    transposed = bool(attrs.get("transposed", False))
    kernel = tuple(w.shape[2:])
    nd = len(kernel)
    if transposed:      # weight [C_in, C_out/groups, *k]
        c_in, c_out = w.shape[0] // groups, w.shape[1]
    else:               # weight [C_out, C_in/groups, *k]
        c_in, c_out = w.shape[1], w.shape[0] // groups
    return (groups, c_in, c_out, kernel, _per_dim(attrs.get("stride"), nd, 1), _per_dim(attrs.get("dilation"), nd, 1),
            _per_dim(attrs.get("padding"), nd, 0), transposed)


def halo_rows(band_rows: int, kernel: int, stride: int, dilation: int, available: int) -> int:
    """Input rows a band of output rows reads through its windows."""
    return min(available, (band_rows - 1) * stride + (kernel - 1) * dilation + 1)


def window_product(x: TensorDesc, w: TensorDesc, y: TensorDesc, attrs: dict, *, grad_input: bool,
                   src: int, weight: int, out: int, bias: int | None = None) -> WindowProduct:
    """The forward product (x -> y), or grad_input's (grad of y -> grad of x)."""
    groups, c_in, c_out, kernel, stride, dilation, padding, transposed = _geometry(x, w, attrs)
    scatter = transposed != grad_input
    if grad_input:
        src_ch, dst_ch, src_sp, dst_sp = c_out, c_in, y.shape[2:], x.shape[2:]
    else:
        src_ch, dst_ch, src_sp, dst_sp = c_in, c_out, x.shape[2:], y.shape[2:]
    if scatter and all(s == 1 for s in stride):
        # A stride-1 scatter is a gather with the flipped kernel and the complementary padding.
        scatter = False
        padding = tuple((k - 1) * d - p for k, d, p in zip(kernel, dilation, padding))
    return WindowProduct(src, weight, out, bias, x.shape[0], groups, src_ch, dst_ch, kernel, stride, dilation,
                         padding, tuple(src_sp), tuple(dst_sp), scatter, weight_k_contiguous=not scatter)


def conv_products(ctx: OpContext) -> tuple[list, KernelGradient | None, int | None]:
    """(window products, kernel gradient, grad_bias output still to compute) a conv record computes."""
    if not ctx.record.name.endswith("backward") and not ctx.record.name.endswith("backward_overrideable"):
        x, w, y = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
        bias = 2 if len(ctx.inputs) > 2 and ctx.inputs[2].numel else None
        return [window_product(x, w, y, ctx.attrs, grad_input=False, src=0, weight=1, out=0, bias=bias)], None, None
    g, x, w = ctx.inputs[:3]
    # Outputs list only the gradients the mask asks for, in order.
    mask = [bool(m) for m in ctx.attrs.get("output_mask", (True, True, False))][:3]
    slot = {i: sum(mask[:i]) for i in range(len(mask)) if mask[i] and sum(mask[:i]) < len(ctx.outputs)}
    windows = [window_product(x, w, g, ctx.attrs, grad_input=True, src=0, weight=2, out=slot[0])] if 0 in slot else []
    bias = slot.get(2) if 2 in slot and ctx.outputs[slot[2]].numel else None
    if 1 not in slot:
        return windows, None, bias
    groups, c_in, c_out, kernel, stride, dilation, _, transposed = _geometry(x, w, ctx.attrs)
    # grad_bias sums grad_out: it joins the kernel gradient when grad_out is its small side.
    small, big = (1, 0) if transposed else (0, 1)
    kernel_grad = KernelGradient(small, big, slot[1], None if transposed else bias, x.shape[0], groups,
                                 c_in if transposed else c_out, c_out if transposed else c_in, kernel, stride,
                                 dilation, tuple(ctx.inputs[small].shape[2:]), tuple(ctx.inputs[big].shape[2:]))
    return windows, kernel_grad, bias if transposed else None
