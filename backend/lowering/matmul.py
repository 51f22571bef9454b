"""Matrix multiplies as blocked TensorE GEMMs (convolutions: ``conv``).

Operand layout decides the transposes: TensorE needs K on partitions for both operands, so
a row-major A[M, K] (K contiguous) or a weight used as W.t() is transposed on chip, while a
K-major operand (e.g. ``x.t()`` in a weight gradient) loads directly.
"""
from __future__ import annotations

from math import ceil, prod

from backend.lowering.builder import OpContext
from backend.lowering.gemm import TensorEngineGemm, emit_gemm, plan_blocked_gemm
from backend.lowering.registry import lowering
from backend.sim.descriptors import TensorDesc
from backend.sim.flops import is_matmul_like

__all__ = ["k_contiguous", "gemm", "tensor_engine_dtype"]

AUTOCAST_DTYPES = ("bfloat16",)


def tensor_engine_dtype(ctx: OpContext, dtype: str) -> str:
    """The dtype TensorE multiplies in: the device's hardware numerics mark fp32 matmul-like ops
    ``autocast="bfloat16"`` (as the Neuron compiler auto-casts them), so they run at the bf16 rate."""
    cast = ctx.attrs.get("autocast")
    if dtype == "float32" and cast in AUTOCAST_DTYPES and is_matmul_like(ctx.record.name):
        return cast
    return dtype


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
    in_dtype = ctx.inputs[a].dtype
    dtype = tensor_engine_dtype(ctx, in_dtype)
    shape = TensorEngineGemm(batch=batch, m=m, k=k, n=n, dtype=dtype, out_dtype=out_desc.dtype,
                             load_dtype=in_dtype if dtype != in_dtype else None,
                             a_transposed=a_transposed, b_transposed=b_transposed, bias=bias_kind,
                             bias_dtype=ctx.inputs[bias].dtype if bias is not None else "float32", **extra)
    emit_gemm(ctx, shape, plan_blocked_gemm(shape, ctx.target, ctx.builder.sbuf_reserved), a, b, bias if bias_kind != "none" else None, out)
    if bias_kind == "full":
        # beta * C arrives per output block: one more streamed operand, added during evacuation.
        c = ctx.inputs[bias]
        ctx.builder.dma(c.nbytes, src="hbm", dst="sbuf", row_bytes=c.shape[-1] * c.itemsize if c.shape else c.nbytes)


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


@lowering("aten::_cdist_forward", "aten::_cdist_backward")
def _cdist(ctx: OpContext) -> None:
    """Pairwise p-norm distances. p = 2 on TensorE: |x|^2 + |y|^2 - 2 x.y with the Gram matrix a GEMM
    and the norms, combine and sqrt finished on chip before the store; backward likewise,
    grad_x1 = x1 * rowsum(G) - G @ x2 with G = grad / dist. Other p have no matmul form: VectorE
    subtracts each x2 row from a tile of x1 rows and reduces |d|^p along the feature axis."""
    backward = ctx.record.name.endswith("backward")
    x1, x2 = ctx.inputs[1:3] if backward else ctx.inputs[:2]
    out, b = ctx.outputs[0], ctx.builder
    *lead, rows1, feat = x1.shape
    rows2, batch = x2.shape[-2], prod(lead)
    parts = min(ctx.target.partitions, max(1, rows1))
    pair_free = ceil(batch * rows1 * rows2 / parts)
    store = ctx.out_to_hbm[0]
    if float(ctx.attrs.get("p", 2.0)) == 2.0:
        ctx.out_to_hbm[0] = False           # the GEMM's output is finished on chip first
        if backward:
            gemm(ctx, batch=batch, m=rows1, k=rows2, n=feat, a=0, b=2, a_transposed=k_contiguous(ctx.inputs[0], -1),
                 b_transposed=False)
        else:
            gemm(ctx, batch=batch, m=rows1, k=feat, n=rows2, a=0, b=1, a_transposed=k_contiguous(x1, -1),
                 b_transposed=True)
        ctx.out_to_hbm[0] = store
        deps = ctx.out_ready[0] or ()
        if backward:        # G = grad / dist and its row sums; x1 * rowsum - G @ x2
            g = b.compute("vector", "tensor_tensor", free_size=pair_free, partitions=parts, n_inputs=2, deps=deps,
                          alu="divide", flops=pair_free)
            g = b.compute("vector", "tensor_reduce", free_size=pair_free, partitions=parts, deps=(g,), alu="add")
            last = b.compute("vector", "tensor_tensor", free_size=ceil(out.numel / parts), partitions=parts,
                             n_inputs=2, deps=(g,), repeat=2, alu="subtract")
        else:
            sq = b.compute("scalar", "activation_reduce", free_size=feat, partitions=parts, deps=deps,
                           repeat=ceil(batch * (rows1 + rows2) / parts), func="square")
            add = b.compute("vector", "tensor_tensor", free_size=pair_free, partitions=parts, n_inputs=2,
                            deps=(sq,), repeat=2, alu="add", flops=pair_free)
            last = b.compute("scalar", "activation", free_size=pair_free, partitions=parts, deps=(add,), func="sqrt")
    else:
        loads = [ctx.ready_deps(i) or (b.dma(t.nbytes, src="hbm", dst="sbuf", partitions=parts,
                                             row_bytes=feat * t.itemsize),)
                 for i, t in enumerate(ctx.inputs) if t.numel]
        tiles = batch * ceil(rows1 / parts) * rows2
        sub = b.compute("vector", "tensor_tensor", free_size=feat, partitions=parts, n_inputs=2,
                        deps=tuple(d for ids in loads for d in ids), repeat=tiles * (2 if backward else 1),
                        alu="subtract", flops=feat)
        last = b.compute("vector", "tensor_reduce", free_size=feat, partitions=parts, deps=(sub,), repeat=tiles,
                         out_free=1, alu="pow", flops=feat)
    if store:
        b.dma(out.nbytes, src="sbuf", dst="hbm", partitions=parts, deps=(last,),
              row_bytes=max(1, out.nbytes // max(1, batch * rows1)))
    ctx.set_ready(0, (last,))
