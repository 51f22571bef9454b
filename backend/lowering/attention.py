"""Fused scaled-dot-product attention (flash style): S = Q K^T, softmax, O = P V in SBUF.

Per head: Q and K are transposed on TensorE so the head dim sits on partitions; S tiles
[128 queries, 512 keys] land in PSUM; VectorE takes the row max, ScalarE's exp also sums the
row; P is transposed so keys sit on partitions and ``O^T = V^T P^T`` streams 512 queries per
matmul. Only Q, K, V (and O, logsumexp) cross HBM. Causal attention skips the blocks above the
diagonal and masks the diagonal ones with GpSimdE ``affine_select``. The backward pass
recomputes P and runs the five products of dV, dP, dQ, dK. Without a causal mask the order of
keys (and of queries) is free, so each partition loads its rows as one contiguous run
(``head_run_bytes``) instead of one descriptor per row; the forward pass frees a loaded Q/K tile
once it is transposed, so a head holds Q^T and K^T but not Q and K beside them.

Head groups are software-pipelined the way a flash-attention kernel overlaps its engines:
each group passes through stages (load, scores, max, exp, transpose P, ...), and pipeline
step ``s`` emits stage ``k`` of group ``s - k`` for every stage, newest stage first. Every
instruction depends only on the data it reads (the exp on the max, the P transposes on the
exp, the final scaling on the row sums) and on the reuse of its buffer: score and product
tiles are double-buffered in PSUM, so a group's scores wait until group g-2's have been read;
operand buffers in SBUF are reused after as many groups as fit in SBUF. No engine waits for
another's unrelated work, so the scheduler overlaps them up to those buffers.
"""
from __future__ import annotations

from collections.abc import Callable
from math import ceil, prod

from backend.lowering.builder import OpContext, itemsize, split_even
from backend.lowering.matmul import tensor_engine_dtype
from backend.lowering.registry import lowering
from backend.sim import assumptions

__all__ = ["attention", "software_pipeline", "head_run_bytes"]


Stage = Callable[[int, int, dict], None]     # (group, heads in it, that group's ids so far)


def software_pipeline(sizes: list[int], stages: list[Stage], groups: list[dict], *, pipelined: bool = True) -> None:
    """Emit ``stages`` for groups of ``sizes`` heads in modulo order, each stage adding its
    instruction ids to ``groups[g]`` (which stages read, their own group's and older ones).

    Step ``s`` runs stage ``k`` on group ``s - k``, later stages first, so a stage's buffer
    dependency on an older group (emitted earlier in the same step or before) always names
    an earlier instruction, and each engine's in-order stream interleaves groups. Without
    ``pipelined`` (fewer buffers than stages: a group's operands cannot load until an older
    group has finished) the groups are emitted one after another.
    """
    if not pipelined:
        for g, r in enumerate(sizes):
            for stage in stages:
                stage(g, r, groups[g])
        return
    for step in range(len(sizes) + len(stages) - 1):
        for k in reversed(range(len(stages))):
            g = step - k
            if 0 <= g < len(sizes):
                stages[k](g, sizes[g], groups[g])


def _group_sizes(heads: int, per_head: int, stages: int, sbuf_bytes: int) -> list[int]:
    """At least ``attention.head_groups`` groups, and more (smaller) ones until a full pipeline of groups
    (one per stage) fits in SBUF, so the loads of a group never wait for an unfinished one."""
    groups = min(heads, int(assumptions.value("attention.head_groups")))
    while groups < heads and stages * per_head * ceil(heads / groups) > sbuf_bytes:
        groups = min(heads, groups * 2)
    return split_even(heads, groups)


def head_run_bytes(shape: tuple, itemsize_: int, causal: bool) -> int:
    """Contiguous bytes per DMA descriptor when a [..., rows, cols] operand moves between HBM and
    128 SBUF partitions. Causal attention tiles rows in sequence order (a tile is 128 consecutive
    rows, one per partition, so one row per descriptor) to skip the blocks above the diagonal.
    Without a mask, softmax and ``P V`` sum over keys in any order and each query's row is
    independent, so partition ``p`` can take rows ``[p*r, (p+1)*r)`` in one run of ``r`` rows --
    the tiles' rows are then strided through the sequence, identically for Q/O (and K/V) --
    which is how a decode kernel streams a long KV cache without per-row descriptors."""
    cols_bytes = (shape[-1] if shape else 1) * itemsize_
    if causal or len(shape) < 2:
        return cols_bytes
    return cols_bytes * max(1, ceil(shape[-2] / 128))


def attention(ctx: OpContext, *, backward: bool) -> None:
    psum_buffers = int(assumptions.value("attention.psum_buffers"))   # tiles in flight per PSUM buffer
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
    blocks = max(1, int(qt * kt * frac))
    operands = ctx.inputs[:off + 3] if backward else (q, k, v)
    # SBUF a head holds while in flight: operands, P (and dP), outputs, and the transposes of Q and K.
    # The forward pass only reads Q^T and K^T, so a loaded Q/K tile's buffer is free once
    # transposed; the backward pass also multiplies by Q and K as loaded and keeps both layouts.
    transposes = q.nbytes + k.nbytes if backward else 0
    per_head = (sum(x.nbytes for x in operands) + transposes + sum(o.nbytes for o in ctx.outputs)) // heads \
        + sq * keys * itemsize(dt) * (2 if backward else 1)
    groups: list[dict] = []     # per group, the ids its stages emitted (filled by software_pipeline)
    in_flight = 1               # groups whose operands SBUF holds at once (set once the stages are known)

    def older(g: int, name: str, distance: int) -> tuple:
        """The buffer-reuse dependency: ``name`` of group ``g - distance``, if there is one."""
        return (groups[g - distance][name],) if g >= distance else ()

    def load(g: int, r: int, ids: dict) -> None:
        loads = [b.dma(x.nbytes // heads, src="hbm", dst="sbuf", partitions=min(128, x.shape[-2]),
                       row_bytes=head_run_bytes(x.shape, x.itemsize, causal), deps=older(g, "last", in_flight), repeat=r)
                 for i, x in enumerate(operands) if x.numel and not ctx.in_sbuf(i)]
        ids["loads"] = (*loads, *(dep for i in range(off + 3) for dep in ctx.ready_deps(i)))

    def scores(g: int, r: int, ids: dict) -> None:
        tr = b.matmul(k=128, m=min(d, 128), n=128, dtype=dt, deps=ids["loads"], repeat=r * (qt + kt) * dt_tiles,
                      opcode="nc_transpose")
        s = b.matmul(k=min(d, 128), m=min(sq, 128), n=min(sk, 512), dtype=dt,
                     deps=(tr, *older(g, "exp", psum_buffers)), repeat=r * max(1, int(qt * dt_tiles * kn * frac)))
        if causal:
            # GpSimdE cannot read PSUM: the diagonal score blocks are masked in SBUF
            s = b.compute("gpsimd", "affine_select", free_size=128, dtype="float32", deps=(s,), repeat=r * qt)
        ids["scores"] = s

    def row_max(g: int, r: int, ids: dict) -> None:
        ids["max"] = b.compute("vector", "tensor_reduce", free_size=keys, dtype="float32", src="psum",
                               deps=(ids["scores"],), repeat=r * qt, alu="max")

    def exp(g: int, r: int, ids: dict) -> None:
        ids["exp"] = b.compute("scalar", "activation_reduce", free_size=keys, dtype="float32", out_dtype=dt,
                               src="psum", deps=(ids["max"],), repeat=r * qt, func="exp")

    def transpose_p(g: int, r: int, ids: dict) -> None:
        ids["pt"] = b.matmul(k=128, m=128, n=128, dtype=dt, deps=(ids["exp"], *older(g, "cp", psum_buffers)),
                             repeat=r * blocks, opcode="nc_transpose")

    def evacuate_p(g: int, r: int, ids: dict) -> None:
        ids["cp"] = b.compute("vector", "tensor_copy", free_size=512, dtype="float32", out_dtype=dt, src="psum",
                              deps=(ids["pt"],), repeat=r * ceil(blocks / 4))
        ids["rc"] = b.compute("vector", "reciprocal", free_size=1, dtype="float32", deps=(ids["exp"],),
                              repeat=r * qt)

    def values(g: int, r: int, ids: dict) -> None:
        ids["o"] = b.matmul(k=128, m=min(dv, 128), n=min(sq, 512), dtype=dt,
                            deps=(ids["cp"], *ids["loads"], *older(g, "last", psum_buffers)),
                            repeat=r * max(1, int(kt * qn * frac)) * ceil(dv / 128))

    def scale(g: int, r: int, ids: dict) -> None:
        ids["last"] = b.compute("vector", "tensor_scalar", free_size=min(sq, 512), partitions=min(dv, 128),
                                dtype="float32", out_dtype=dt, src="psum", deps=(ids["o"], ids["rc"]), repeat=r * qn,
                                alu="multiply")
        store(r, ids)

    def products(g: int, r: int, ids: dict) -> None:
        war = older(g, "last", psum_buffers)
        ids["dv"] = b.matmul(k=128, m=128, n=min(dv, 512), dtype=dt, deps=(ids["cp"], *ids["loads"], *war),
                             repeat=r * blocks)
        ids["dp"] = b.matmul(k=min(dv, 128), m=128, n=min(sk, 512), dtype=dt, deps=(*ids["loads"], *war),
                             repeat=r * max(1, int(qt * kn * frac)))

    def grad_scores(g: int, r: int, ids: dict) -> None:
        ids["ds"] = b.compute("vector", "tensor_tensor", free_size=keys, dtype="float32", src="psum",
                              deps=(ids["cp"], ids["rc"], ids["dp"]), repeat=r * qt * 2, alu="multiply")

    def grads(g: int, r: int, ids: dict) -> None:
        """dS^T, dQ, dK on TensorE, then every gradient evacuated and stored."""
        dqk = b.matmul(k=128, m=128, n=min(d, 512), dtype=dt, deps=(ids["ds"],), repeat=r * blocks * 3)
        ids["last"] = b.compute("vector", "tensor_copy", free_size=min(d, 512), dtype="float32", out_dtype=dt,
                                src="psum", deps=(ids["dv"], dqk), repeat=r * (qt + kt) * 2)
        store(r, ids)

    def store(r: int, ids: dict) -> None:
        for kk, o_t in enumerate(ctx.outputs):
            if o_t.numel and ctx.out_to_hbm[kk]:
                b.dma(o_t.nbytes // heads, src="sbuf", dst="hbm",
                      partitions=min(128, o_t.shape[-2] if len(o_t.shape) > 1 else 1),
                      row_bytes=head_run_bytes(o_t.shape, o_t.itemsize, causal or len(o_t.shape) != len(q.shape)),
                      deps=(ids["last"],), repeat=r)

    stages = [load, scores, row_max, exp, transpose_p, evacuate_p,
              *([products, grad_scores, grads] if backward else [values, scale])]
    room = max(0, t.sbuf_usable_bytes - b.sbuf_reserved)      # what a fused kernel's residents leave
    sizes = _group_sizes(heads, per_head, len(stages), room)
    in_flight = max(1, min(len(sizes), room // max(1, per_head * max(sizes))))
    groups[:] = [{} for _ in sizes]
    software_pipeline(sizes, stages, groups, pipelined=in_flight >= min(len(sizes), len(stages)))
    for kk in range(len(ctx.outputs)):
        ctx.set_ready(kk, (groups[-1]["last"],))
    b.note_sbuf(min(in_flight, len(stages)) * per_head * max(sizes))
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
