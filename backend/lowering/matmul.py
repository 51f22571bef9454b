"""Matrix multiplies and convolutions as blocked TensorE GEMMs.

Operand layout decides the transposes: TensorE needs K on partitions for both operands, so
a row-major A[M, K] (K contiguous) or a weight used as W.t() is transposed on chip, while a
K-major operand (e.g. ``x.t()`` in a weight gradient) loads directly. Convolutions are
implicit GEMMs: each filter tap is a K-chunk of input channels that reads the SBUF-resident
input window with a shifted access pattern, so the input crosses HBM once, not kh*kw times.
"""
from __future__ import annotations

from math import prod

from backend.lowering.builder import OpContext
from backend.lowering.gemm import GemmShape, emit_gemm, plan_gemm
from backend.lowering.registry import lowering
from backend.sim.descriptors import TensorDesc

__all__ = ["k_contiguous", "gemm"]


def k_contiguous(t: TensorDesc, k_dim: int) -> bool:
    """True when the contraction dim of ``t`` is its contiguous one (needs TensorE transposes)."""
    if len(t.shape) < 2:
        return False
    k_dim %= len(t.shape)
    other = len(t.shape) - 1 if k_dim == len(t.shape) - 2 else len(t.shape) - 2
    if t.shape[other] == 1 or t.shape[k_dim] == 1:
        return False
    if t.strides is None:
        return k_dim == len(t.shape) - 1
    return t.strides[k_dim] == 1 and t.strides[other] != 1


def gemm(ctx: OpContext, *, batch: int, m: int, k: int, n: int, a: int, b: int, bias: int | None = None,
         a_transposed: bool, b_transposed: bool, out: int = 0, **extra) -> None:
    if min(batch, m, k, n) == 0:
        return
    out_desc = ctx.outputs[out] if out < len(ctx.outputs) else ctx.outputs[0]
    bias_kind = "none"
    if bias is not None and ctx.attrs.get("beta", 1) != 0 and ctx.inputs[bias].numel:
        bias_kind = "row" if ctx.inputs[bias].numel <= n else "full"
    shape = GemmShape(batch=batch, m=m, k=k, n=n, dtype=ctx.inputs[a].dtype, out_dtype=out_desc.dtype,
                      a_transposed=a_transposed, b_transposed=b_transposed, bias=bias_kind,
                      bias_dtype=ctx.inputs[bias].dtype if bias is not None else "float32", **extra)
    emit_gemm(ctx, shape, plan_gemm(shape, ctx.target), a, b, bias if bias_kind != "none" else None, out)
    if bias_kind == "full":
        # beta * C arrives per output block: one more streamed operand, added during evacuation.
        c = ctx.inputs[bias]
        ctx.b.dma(c.nbytes, src="hbm", dst="sbuf", row_bytes=c.shape[-1] * c.itemsize if c.shape else c.nbytes)


@lowering("aten::mm", "aten::addmm", "aten::_scaled_mm")
def _mm(ctx: OpContext) -> None:
    off = 1 if ctx.record.name.endswith("addmm") else 0
    a, b = ctx.inputs[off], ctx.inputs[off + 1]
    gemm(ctx, batch=1, m=a.shape[0], k=a.shape[1], n=b.shape[1], a=off, b=off + 1,
         bias=0 if off else None, a_transposed=k_contiguous(a, -1), b_transposed=k_contiguous(b, -2))


@lowering("aten::bmm", "aten::baddbmm")
def _bmm(ctx: OpContext) -> None:
    off = 1 if ctx.record.name.endswith("baddbmm") else 0
    a, b = ctx.inputs[off], ctx.inputs[off + 1]
    gemm(ctx, batch=a.shape[0], m=a.shape[1], k=a.shape[2], n=b.shape[2], a=off, b=off + 1,
         bias=0 if off else None, a_transposed=k_contiguous(a, -1), b_transposed=k_contiguous(b, -2))


@lowering("aten::matmul", "aten::mv", "aten::dot", "aten::vdot", "aten::addmv")
def _matmul(ctx: OpContext) -> None:
    off = 1 if ctx.record.name.endswith("addmv") else 0
    a, b = ctx.inputs[off], ctx.inputs[off + 1]
    k = a.shape[-1] if a.shape else 1
    n = b.shape[-1] if len(b.shape) >= 2 else 1
    if len(b.shape) <= 2:      # a's leading dims fold into M
        batch, m = 1, max(1, a.numel // max(1, k))
    else:
        batch = max(1, prod(ctx.outputs[0].shape[:-2]))
        m = a.shape[-2] if len(a.shape) >= 2 else 1
    gemm(ctx, batch=batch, m=m, k=k, n=n, a=off, b=off + 1, bias=0 if off else None,
         a_transposed=k_contiguous(a, -1), b_transposed=len(b.shape) >= 2 and k_contiguous(b, -2))


@lowering("aten::linear")
def _linear(ctx: OpContext) -> None:
    x, w = ctx.inputs[0], ctx.inputs[1]
    k = x.shape[-1]
    gemm(ctx, batch=1, m=max(1, x.numel // max(1, k)), k=k, n=w.shape[0], a=0, b=1,
         bias=2 if len(ctx.inputs) > 2 else None, a_transposed=k_contiguous(x, -1),
         b_transposed=w.strides is None or w.strides[-1] == 1)


def _reuse(patch_elements: int, input_elements: int) -> int:
    """How many times each input element appears in the implicit im2col matrix (taps / stride^2)."""
    return max(1, round(patch_elements / max(1, input_elements)))


def _conv_dims(x: TensorDesc, w: TensorDesc, attrs: dict):
    groups = int(attrs.get("groups", 1) or 1)
    transposed = bool(attrs.get("transposed", False))
    taps = prod(w.shape[2:])
    if transposed:      # weight [C_in, C_out/groups, *k]
        c_in_g, c_out_g = w.shape[0] // groups, w.shape[1]
    else:               # weight [C_out, C_in/groups, *k]
        c_in_g, c_out_g = w.shape[1], w.shape[0] // groups
    return x, groups, taps, c_in_g, c_out_g


@lowering("aten::convolution", "aten::_convolution", "aten::convolution_overrideable",
          "aten::conv1d", "aten::conv2d", "aten::conv3d")
def _convolution(ctx: OpContext) -> None:
    x, groups, taps, c_in_g, c_out_g = _conv_dims(ctx.inputs[0], ctx.inputs[1], ctx.attrs)
    out = ctx.outputs[0]
    pixels = x.shape[0] * prod((x if ctx.attrs.get("transposed") else out).shape[2:])
    gemm(ctx, batch=groups, m=c_out_g, k=c_in_g * taps, n=pixels, a=1, b=0,
         bias=2 if len(ctx.inputs) > 2 else None, a_transposed=True, b_transposed=False,
         k_tile=min(128, c_in_g), b_reuse=_reuse(c_in_g * taps * pixels, x.numel // groups))


@lowering("aten::convolution_backward", "aten::convolution_backward_overrideable")
def _convolution_backward(ctx: OpContext) -> None:
    """grad_input: a transposed conv of grad_out; grad_weight: input patches x grad_out."""
    grad_out = ctx.inputs[0]
    x, groups, taps, c_in_g, c_out_g = _conv_dims(ctx.inputs[1], ctx.inputs[2], ctx.attrs)
    mask = ctx.attrs.get("output_mask", (True, True, False))
    out_pixels = grad_out.shape[0] * prod(grad_out.shape[2:])
    in_pixels = x.shape[0] * prod(x.shape[2:])
    if mask[0]:
        gemm(ctx, batch=groups, m=c_in_g, k=c_out_g * taps, n=in_pixels, a=2, b=0, a_transposed=False,
             b_transposed=False, k_tile=min(128, c_out_g),
             b_reuse=_reuse(c_out_g * taps * in_pixels, grad_out.numel // groups))
    if len(mask) > 1 and mask[1]:
        gemm(ctx, batch=groups, m=c_out_g, k=out_pixels, n=c_in_g * taps, a=0, b=1, a_transposed=True,
             b_transposed=True, b_reuse=_reuse(out_pixels * c_in_g * taps, x.numel // groups), out=1)
    if len(mask) > 2 and mask[2]:
        # grad_bias: a column sum of grad_out, one ones-vector matmul per 128 x 512 tile.
        gemm(ctx, batch=1, m=1, k=out_pixels, n=grad_out.shape[1], a=0, b=0, a_transposed=False,
             b_transposed=True, out=2)
