"""Fused scaled-dot-product attention (flash style): S = Q K^T, softmax, O = P V in SBUF.

Per head: Q and K are transposed on TensorE so the head dim sits on partitions; S tiles
[128 queries, 512 keys] land in PSUM; VectorE takes the row max, ScalarE's exp also sums the
row; P is transposed so keys sit on partitions and ``O^T = V^T P^T`` streams 512 queries per
matmul. Only Q, K, V (and O, logsumexp) cross HBM. Causal attention skips the blocks above the
diagonal and masks the diagonal ones with GpSimdE ``affine_select``. The backward pass
recomputes P and runs the five products of dV, dP, dQ, dK.

Head groups are software-pipelined by one stage (the front of group g is emitted before the
back of group g-1), so TensorE computes the next scores while Vector/Scalar run the softmax.
"""
from __future__ import annotations

from math import ceil, prod

from backend.lowering.builder import OpContext, split_even
from backend.lowering.matmul import tensor_engine_dtype
from backend.lowering.registry import lowering
from backend.sim import assumptions

__all__ = ["attention"]


def attention(ctx: OpContext, *, backward: bool) -> None:
    off = 1 if backward else 0
    q, k, v = ctx.inputs[off:off + 3]
    *batch, sq, d = q.shape
    sk, dv = k.shape[-2], v.shape[-1]
    heads = max(1, prod(batch))
    if min(sq, sk, d, dv) == 0:
        return
    b, t = ctx.builder, ctx.target
    dt = tensor_engine_dtype(ctx, q.dtype)
    qt, kt, kn = ceil(sq / 128), ceil(sk / 128), ceil(sk / 512)
    dt_tiles, qn = ceil(d / 128), ceil(sq / 512)
    causal = bool(ctx.attrs.get("is_causal", False))
    frac = (qt + 1) / (2 * qt) if causal else 1.0       # key blocks at or below the diagonal
    keys = max(1, int(sk * frac))

    def front(r: int, deps: tuple) -> tuple:
        """Loads, transposes, scores and softmax for r heads."""
        loads = [b.dma(x.nbytes // heads, src="hbm", dst="sbuf", partitions=min(128, x.shape[-2]),
                       row_bytes=x.shape[-1] * x.itemsize, deps=deps, repeat=r)
                 for i, x in enumerate(ctx.inputs[:off + 3] if backward else (q, k, v)) if x.numel and not ctx.in_sbuf(i)]
        loads += [dep for i in range(off + 3) for dep in ctx.ready_deps(i)]
        tr = b.matmul(k=128, m=min(d, 128), n=128, dtype=dt, deps=loads, repeat=r * (qt + kt) * dt_tiles,
                      opcode="nc_transpose")
        s = b.matmul(k=min(d, 128), m=min(sq, 128), n=min(sk, 512), dtype=dt, deps=(tr,),
                     repeat=r * max(1, int(qt * dt_tiles * kn * frac)))
        chain = (s,)
        if causal:
            # GpSimdE cannot read PSUM: the diagonal score blocks are masked in SBUF
            chain = (b.compute("gpsimd", "affine_select", free_size=128, dtype="float32",
                               deps=chain, repeat=r * qt),)
        mx = b.compute("vector", "tensor_reduce", free_size=keys, dtype="float32", src="psum", deps=chain,
                       repeat=r * qt, alu="max")
        ex = b.compute("scalar", "activation_reduce", free_size=keys, dtype="float32", out_dtype=dt, src="psum",
                       deps=(mx,), repeat=r * qt, func="exp")
        rc = b.compute("vector", "reciprocal", free_size=1, dtype="float32", deps=(ex,), repeat=r * qt)
        return (rc, ex)

    def back(r: int, deps: tuple) -> int:
        """Transpose P, the value products (and gradients), evacuate, store."""
        blocks = max(1, int(qt * kt * frac))
        pt = b.matmul(k=128, m=128, n=128, dtype=dt, deps=deps, repeat=r * blocks, opcode="nc_transpose")
        cp = b.compute("vector", "tensor_copy", free_size=512, dtype="float32", out_dtype=dt, src="psum",
                       deps=(pt,), repeat=r * ceil(blocks / 4))
        if not backward:
            o = b.matmul(k=128, m=min(dv, 128), n=min(sq, 512), dtype=dt, deps=(cp,),
                         repeat=r * max(1, int(kt * qn * frac)) * ceil(dv / 128))
            last = b.compute("vector", "tensor_scalar", free_size=min(sq, 512), partitions=min(dv, 128),
                             dtype="float32", out_dtype=dt, src="psum", deps=(o,), repeat=r * qn, alu="multiply")
        else:
            prods = [b.matmul(k=128, m=128, n=min(dv, 512), dtype=dt, deps=(cp,), repeat=r * blocks),      # dV
                     b.matmul(k=min(dv, 128), m=128, n=min(sk, 512), dtype=dt, deps=(cp,),
                              repeat=r * max(1, int(qt * kn * frac))),                                      # dP
                     b.compute("vector", "tensor_tensor", free_size=keys, dtype="float32", src="psum",
                               deps=(cp,), repeat=r * qt * 2, alu="multiply")]                             # dS
            prods.append(b.matmul(k=128, m=128, n=min(d, 512), dtype=dt, deps=(prods[-1],),
                                  repeat=r * blocks * 3))                                                   # dS^T, dQ, dK
            last = b.compute("vector", "tensor_copy", free_size=min(d, 512), dtype="float32", out_dtype=dt,
                             src="psum", deps=prods, repeat=r * (qt + kt) * 2)
        for kk, o_t in enumerate(ctx.outputs):
            if o_t.numel and ctx.out_to_hbm[kk]:
                b.dma(o_t.nbytes // heads, src="sbuf", dst="hbm", partitions=min(128, o_t.shape[-2] if len(o_t.shape) > 1 else 1),
                      row_bytes=(o_t.shape[-1] if o_t.shape else 1) * o_t.itemsize, deps=(last,), repeat=r)
        return last

    sizes = split_even(heads, assumptions.value("attention.head_groups"))
    fronts, backs = [], []
    for g, r in enumerate(sizes):
        fronts.append(front(r, (backs[g - 2],) if g >= 2 else ()))
        if g >= 1:
            backs.append(back(sizes[g - 1], fronts[g - 1]))
    backs.append(back(sizes[-1], fronts[-1]))
    for kk in range(len(ctx.outputs)):
        ctx.set_ready(kk, backs[-1:])
    b.note_sbuf(2 * (q.nbytes + k.nbytes + v.nbytes) // heads * max(sizes))
    b.note_psum(t.psum_bytes)


@lowering("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
          "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_efficient_attention",
          "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_fused_attention_overrideable")
def _sdpa(ctx: OpContext) -> None:
    attention(ctx, backward=False)


@lowering("aten::_scaled_dot_product_flash_attention_backward",
          "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
          "aten::_scaled_dot_product_efficient_attention_backward",
          "aten::_scaled_dot_product_cudnn_attention_backward",
          "aten::_scaled_dot_product_fused_attention_overrideable_backward")
def _sdpa_backward(ctx: OpContext) -> None:
    attention(ctx, backward=True)
