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
another's unrelated work, so the scheduler overlaps them up to those buffers. Where whole heads
cannot fill that pipeline (long sequences: P of one head at 8,192 tokens is 65 MiB), each head's
queries are walked in blocks, as a flash kernel walks query tiles with the head's K and V
resident; a unit of the pipeline is then one block of one head.

Grouped-query attention (fewer K/V heads than query heads) reads each KV head once for its
group of query heads, as Neuron's flash and decode kernels do. Without a causal mask the group's
queries are independent rows over the same keys, so they stack into one head of ``group x
queries`` rows (a decode step's group fills the stationary columns that one query leaves empty);
with one, each query head keeps its own diagonal and the group shares the resident K/V.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import ceil, prod

from backend.lowering.builder import OpContext, itemsize, split_even
from backend.lowering.matmul import tensor_engine_dtype
from backend.lowering.registry import lowering
from backend.sim import assumptions

__all__ = ["attention", "software_pipeline", "head_run_bytes"]


Stage = Callable[[int, int, dict], None]     # (group, heads in it, that group's ids so far)


def software_pipeline(sizes: list[int], stages: list[Stage], groups: list[dict], *, depth: int | None = None) -> None:
    """Emit ``stages`` for groups of ``sizes`` heads in modulo order, each stage adding its
    instruction ids to ``groups[g]`` (which stages read, their own group's and older ones).

    Step ``s`` runs stage ``k`` on group ``s - k``, later stages first, so a stage's buffer
    dependency on an older group (emitted earlier in the same step or before) always names
    an earlier instruction, and each engine's in-order stream interleaves groups. With a
    ``depth`` below the number of stages (fewer buffers than stages: a group's operands cannot
    load until the group ``depth`` before it has finished) consecutive stages run as one, so
    that group's last stage is emitted before the load that waits for it; depth 1 emits the
    groups one after another.
    """
    depth = len(stages) if depth is None else max(1, min(depth, len(stages)))
    per = ceil(len(stages) / depth)
    merged = [stages[i:i + per] for i in range(0, len(stages), per)]
    for step in range(len(sizes) + len(merged) - 1):
        for k in reversed(range(len(merged))):
            g = step - k
            if 0 <= g < len(sizes):
                for stage in merged[k]:
                    stage(g, sizes[g], groups[g])


@dataclass(frozen=True)
class _Blocking:
    """How a flash kernel walks the heads: each head's queries in ``splits`` blocks (units), units
    in pipelined groups of ``sizes``, ``in_flight`` groups' operands held in SBUF at once.

    A unit holds its query-side operands, outputs and P (``unit_bytes``); K and V (and, backward,
    their gradients) are held once per head for all its units (``head_bytes``), as a flash kernel
    keeps a head's K/V resident while it walks the query tiles."""

    heads: int
    splits: int
    sizes: list
    in_flight: int
    unit_bytes: int
    head_bytes: int

    def sbuf_bytes(self, groups: int) -> int:
        units = groups * max(self.sizes)
        # the most heads that many consecutive units can touch
        heads = min(self.heads, 1 + ceil((units - 1) / self.splits))
        return units * self.unit_bytes + heads * self.head_bytes


def _blocking(heads: int, q_tiles: int, stages: int, room: int, head_bytes: int, query_bytes: int) -> _Blocking:
    """At least ``attention.head_groups`` groups, and more (smaller) ones until a full pipeline of
    groups (one per stage) fits in ``room``, so the loads of a group never wait for an unfinished
    one. A head's queries are split in blocks (powers of two, down to one 128-row tile) only as
    far as needed: the fewest blocks that hold the most groups in flight (up to one per stage),
    and that fit at all where they can. ``query_bytes``: a head's query-side bytes."""
    best, best_key = None, None
    splits = 1
    while True:
        units = heads * splits
        unit = ceil(query_bytes / splits)
        groups = min(units, int(assumptions.value("attention.head_groups")))
        fit = _Blocking(heads, splits, split_even(units, groups), 1, unit, head_bytes)
        while groups < units and fit.sbuf_bytes(stages) > room:
            groups = min(units, groups * 2)
            fit = _Blocking(heads, splits, split_even(units, groups), 1, unit, head_bytes)
        in_flight = 1
        while in_flight < len(fit.sizes) and fit.sbuf_bytes(in_flight + 1) <= room:
            in_flight += 1
        key = (fit.sbuf_bytes(1) <= room, in_flight >= min(stages, len(fit.sizes)), min(in_flight, stages))
        if best_key is None or key > best_key:
            best, best_key = _Blocking(heads, splits, fit.sizes, in_flight, unit, head_bytes), key
        if best_key[:2] == (True, True) or splits >= q_tiles:
            return best
        splits = min(q_tiles, splits * 2)


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


def _stacked(shape: tuple, q_heads: int, fold: int) -> tuple:
    """A query-side operand's [..., heads, rows, cols] shape with each ``fold`` consecutive heads'
    rows stacked (``fold`` query heads share one KV head); K/V-side shapes pass unchanged."""
    if fold == 1 or len(shape) < 3 or prod(shape[:-2]) != q_heads:
        return tuple(shape)
    return (*shape[:-3], shape[-3] // fold, shape[-2] * fold, shape[-1])


def attention(ctx: OpContext, *, backward: bool) -> None:
    psum_buffers = int(assumptions.value("attention.psum_buffers"))   # tiles in flight per PSUM buffer
    off = 1 if backward else 0
    q, k, v = ctx.inputs[off:off + 3]
    causal = bool(ctx.attrs.get("is_causal", False))
    q_heads = max(1, prod(q.shape[:-2]))
    fold = 1 if causal else max(1, q_heads // max(1, prod(k.shape[:-2])))
    shape_of = lambda x: _stacked(x.shape, q_heads, fold)      # query-side tensors as the kernel lays them
    *batch, sq, d = shape_of(q)
    sk, dv = k.shape[-2], v.shape[-1]
    heads = max(1, prod(batch))
    if min(sq, sk, d, dv) == 0:
        return
    b, t = ctx.builder, ctx.target
    dt = tensor_engine_dtype(ctx, q.dtype)
    qt, kt, kn = ceil(sq / 128), ceil(sk / 128), ceil(sk / 512)
    dt_tiles = ceil(d / 128)
    frac = (qt + 1) / (2 * qt) if causal else 1.0       # key blocks at or below the diagonal
    keys = max(1, int(sk * frac))
    blocks = max(1, int(qt * kt * frac))
    operands = ctx.inputs[:off + 3] if backward else (q, k, v)
    # SBUF a head holds while in flight: operands, P (and dP), outputs, and the transposes of Q and K.
    # The forward pass only reads Q^T and K^T, so a loaded Q/K tile's buffer is free once
    # transposed; the backward pass also multiplies by Q and K as loaded and keeps both layouts.
    # K and V (backward: K^T, dK, dV too) are held per head; the rest per block of queries.
    key_side = sum(x.nbytes for x in (k, v)) + sum(o.nbytes for o in ctx.outputs[1:3] if backward) \
        + (k.nbytes if backward else 0)
    everything = sum(x.nbytes for x in operands) + sum(o.nbytes for o in ctx.outputs) + (q.nbytes + k.nbytes) * backward
    groups: list[dict] = []     # per group, the ids its stages emitted (filled by software_pipeline)
    # Set once the stages are known: query blocks per head, groups in flight, and per query
    # block its rows and their 512-query moving tiles (the stages read them when emitted).
    u = in_flight = sq_u = qn_u = 1

    def n(r: int, per_head: float) -> int:
        """Instructions of a group of ``r`` units, for a count of ``per_head`` per whole head."""
        return max(1, ceil(r * per_head / u))

    def older(g: int, name: str, distance: int) -> tuple:
        """The buffer-reuse dependency: ``name`` of group ``g - distance``, if there is one."""
        return (groups[g - distance][name],) if g >= distance else ()

    def load(g: int, r: int, ids: dict) -> None:
        loads = [b.dma(x.nbytes // (heads * u), src="hbm", dst="sbuf", partitions=min(128, shape_of(x)[-2]),
                       row_bytes=head_run_bytes(shape_of(x), x.itemsize, causal), deps=older(g, "last", in_flight),
                       repeat=r)
                 for i, x in enumerate(operands) if x.numel and not ctx.in_sbuf(i)]
        ids["loads"] = (*loads, *(dep for i in range(off + 3) for dep in ctx.ready_deps(i)))

    def scores(g: int, r: int, ids: dict) -> None:
        tr = b.matmul(k=128, m=min(d, 128), n=128, dtype=dt, deps=ids["loads"], repeat=n(r, (qt + kt) * dt_tiles),
                      opcode="nc_transpose")
        s = b.matmul(k=min(d, 128), m=min(sq, 128), n=min(sk, 512), dtype=dt,
                     deps=(tr, *older(g, "exp", psum_buffers)), repeat=n(r, max(1, int(qt * dt_tiles * kn * frac))))
        if causal:
            # GpSimdE cannot read PSUM: the diagonal score blocks are masked in SBUF
            s = b.compute("gpsimd", "affine_select", free_size=128, dtype="float32", deps=(s,), repeat=n(r, qt))
        ids["scores"] = s

    def row_max(g: int, r: int, ids: dict) -> None:
        ids["max"] = b.compute("vector", "tensor_reduce", free_size=keys, dtype="float32", src="psum",
                               deps=(ids["scores"],), repeat=n(r, qt), alu="max")

    def exp(g: int, r: int, ids: dict) -> None:
        ids["exp"] = b.compute("scalar", "activation_reduce", free_size=keys, dtype="float32", out_dtype=dt,
                               src="psum", deps=(ids["max"],), repeat=n(r, qt), func="exp")

    def transpose_p(g: int, r: int, ids: dict) -> None:
        ids["pt"] = b.matmul(k=128, m=128, n=128, dtype=dt, deps=(ids["exp"], *older(g, "cp", psum_buffers)),
                             repeat=n(r, blocks), opcode="nc_transpose")

    def evacuate_p(g: int, r: int, ids: dict) -> None:
        ids["cp"] = b.compute("vector", "tensor_copy", free_size=512, dtype="float32", out_dtype=dt, src="psum",
                              deps=(ids["pt"],), repeat=n(r, ceil(blocks / 4)))
        ids["rc"] = b.compute("vector", "reciprocal", free_size=1, dtype="float32", deps=(ids["exp"],),
                              repeat=n(r, qt))

    def values(g: int, r: int, ids: dict) -> None:
        ids["o"] = b.matmul(k=128, m=min(dv, 128), n=min(sq_u, 512), dtype=dt,
                            deps=(ids["cp"], *ids["loads"], *older(g, "last", psum_buffers)),
                            repeat=r * max(1, int(kt * qn_u * frac)) * ceil(dv / 128))

    def scale(g: int, r: int, ids: dict) -> None:
        ids["last"] = b.compute("vector", "tensor_scalar", free_size=min(sq_u, 512), partitions=min(dv, 128),
                                dtype="float32", out_dtype=dt, src="psum", deps=(ids["o"], ids["rc"]), repeat=r * qn_u,
                                alu="multiply")
        store(r, ids)

    def products(g: int, r: int, ids: dict) -> None:
        war = older(g, "last", psum_buffers)
        ids["dv"] = b.matmul(k=128, m=128, n=min(dv, 512), dtype=dt, deps=(ids["cp"], *ids["loads"], *war),
                             repeat=n(r, blocks))
        ids["dp"] = b.matmul(k=min(dv, 128), m=128, n=min(sk, 512), dtype=dt, deps=(*ids["loads"], *war),
                             repeat=n(r, max(1, int(qt * kn * frac))))

    def grad_scores(g: int, r: int, ids: dict) -> None:
        ids["ds"] = b.compute("vector", "tensor_tensor", free_size=keys, dtype="float32", src="psum",
                              deps=(ids["cp"], ids["rc"], ids["dp"]), repeat=n(r, qt * 2), alu="multiply")

    def grads(g: int, r: int, ids: dict) -> None:
        """dS^T, dQ, dK on TensorE, then every gradient evacuated and stored."""
        dqk = b.matmul(k=128, m=128, n=min(d, 512), dtype=dt, deps=(ids["ds"],), repeat=n(r, blocks * 3))
        ids["last"] = b.compute("vector", "tensor_copy", free_size=min(d, 512), dtype="float32", out_dtype=dt,
                                src="psum", deps=(ids["dv"], dqk), repeat=n(r, (qt + kt) * 2))
        store(r, ids)

    def store(r: int, ids: dict) -> None:
        for kk, o_t in enumerate(ctx.outputs):
            if o_t.numel and ctx.out_to_hbm[kk]:
                shape = shape_of(o_t)
                b.dma(o_t.nbytes // (heads * u), src="sbuf", dst="hbm",
                      partitions=min(128, shape[-2] if len(shape) > 1 else 1),
                      row_bytes=head_run_bytes(shape, o_t.itemsize, causal or len(shape) != len(q.shape)),
                      deps=(ids["last"],), repeat=r)

    stages = [load, scores, row_max, exp, transpose_p, evacuate_p,
              *([products, grad_scores, grads] if backward else [values, scale])]
    plan = _blocking(heads, qt, len(stages), max(0, t.sbuf_usable_bytes - b.sbuf_reserved), key_side // heads,
                     (everything - key_side) // heads + sq * keys * itemsize(dt) * (2 if backward else 1))
    sizes, u, in_flight = plan.sizes, plan.splits, plan.in_flight
    sq_u = ceil(sq / u)
    qn_u = ceil(sq_u / 512)
    groups[:] = [{} for _ in sizes]
    software_pipeline(sizes, stages, groups, depth=None if in_flight >= len(sizes) else in_flight)
    for kk in range(len(ctx.outputs)):
        ctx.set_ready(kk, (groups[-1]["last"],))
    b.note_sbuf(plan.sbuf_bytes(min(in_flight, len(stages))))
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
