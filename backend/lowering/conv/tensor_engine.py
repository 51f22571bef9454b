"""Convolutions on TensorE: implicit GEMMs, weights stationary, input windows moving.

A window product dst[cd, o] = sum over (cs, tap) of w * src[cs, o + tap] is a GEMM with
M = dst channels, N = dst pixels (512 per moving tile) and K = src channels x taps. The src
crosses HBM once into SBUF with channels on partitions; a tap is the same tile read at a
shifted free offset, so taps cost no DMA. A matmul's time does not depend on how many of
the 128 PE rows K fills (max(min(64, M), N) cycles), so the mapping's job is to fill them:

- 128 or more src channels: one K tile per 128 channels per tap.
- fewer (r) channels: a moving access pattern applies one free offset to every partition,
  so to stack taps on partitions the input must be present as copies, each pre-shifted by
  one tap of a sub-window and at its own partition offset; one K tile then holds the whole
  sub-window (at most 128 // r taps). The copies come in one broadcast load (the input is
  read from HBM once, the DMA engines write every copy), so the candidates weigh DMA time
  against the matmuls they save, up to the full im2col (a copy per tap).
- small groups: block-diagonal weights put ``g_pack`` groups into one matmul (the zero
  blocks ride along: the cost does not grow with K, nor with M past 64 columns); only the
  diagonal blocks cross HBM.

A kernel gradient (grad_weight) contracts over pixels: K = output pixels on partitions, so
both grad_out and the input windows are transposed on TensorE, a transpose per tap window
(or per K tile of shifted copies).
"""
from __future__ import annotations

from itertools import product
from math import ceil, prod

from backend.lowering.builder import Emitter, OpContext, itemsize, split_even
from backend.lowering.conv.geometry import KernelGradient, WindowProduct
from backend.lowering.gemm import TensorEngineGemm, emit_gemm, plan_blocked_gemm
from backend.lowering.matmul import tensor_engine_dtype
from backend.sim import assumptions

# Block splits tried for each mapping: the planner's own (fewest, largest blocks), and one block
# per emitted group (gemm.max_block_groups), so the first load and the last store are a 16th of
# the transfers each.

__all__ = ["tap_packings", "tensor_window", "tensor_kernel_gradient"]


def tap_packings(channels: int, kernel: tuple, pe_rows: int) -> list[tuple[int, int]]:
    """(K tiles, channels of input copies in SBUF) ways to put ``channels`` x taps on ``pe_rows`` rows.

    Only options that beat every other on one count are kept (fewer tiles or fewer copies)."""
    taps = prod(kernel)
    full, rest = divmod(channels, pe_rows)
    if not rest:
        return [(full * taps, full * pe_rows)]
    fit = pe_rows // rest
    best: dict[int, int] = {taps: ceil(taps * rest / pe_rows)}      # full im2col
    for window in product(*(range(1, k + 1) for k in kernel)):
        copies = prod(window)
        if copies <= fit:
            tiles = prod(ceil(k / a) for k, a in zip(kernel, window))
            best[copies] = min(best.get(copies, tiles), tiles)
    options, fewest = [], None
    for copies in sorted(best):
        if fewest is None or best[copies] < fewest:
            fewest = best[copies]
            options.append((full * taps + fewest, full * pe_rows + copies * rest))
    return options


def _dtypes(ctx: OpContext, src: int, out: int) -> dict:
    in_dtype = ctx.inputs[src].dtype
    dtype = tensor_engine_dtype(ctx, in_dtype)
    return dict(dtype=dtype, out_dtype=ctx.outputs[out].dtype, load_dtype=in_dtype if dtype != in_dtype else None)


def _group_pack(groups: int, src_ch: int, dst_ch: int, rows: int, cols: int) -> int:
    """Groups per block-diagonal matmul: as many as fit the PE rows and the stationary columns."""
    if groups == 1 or src_ch >= rows or dst_ch >= cols:
        return 1
    return max(1, min(groups, rows // src_ch, cols // dst_ch))


def _gemm(shape: TensorEngineGemm, ctx: OpContext, a: int, b: int, bias: int | None, out: int) -> Emitter:
    plan = plan_blocked_gemm(shape, ctx.target, ctx.builder.sbuf_reserved)
    return lambda ctx: emit_gemm(ctx, shape, plan, a, b, bias, out)


def tensor_window(ctx: OpContext, p: WindowProduct) -> list[list[Emitter]]:
    """A WindowProduct on TensorE: per phase, one candidate per tap packing."""
    t = ctx.target
    kernels, _ = p.phases()
    total = sum(kernels.values())
    g_pack = _group_pack(p.groups, p.src_ch, p.dst_ch, t.pe_rows, t.stationary_free_max)
    rows = g_pack * p.src_ch
    src_pixels = p.batch * prod(p.src_spatial)     # per channel
    kinds = _dtypes(ctx, p.src, p.out)
    bias = dict(bias="partition", bias_dtype=ctx.inputs[p.bias].dtype) if p.bias is not None else {}
    phases = []
    for kernel, pixels in kernels.items():
        share = src_pixels * pixels / total          # the src this phase's outputs read
        # A strided gather's windows span ``spread`` source pixels per output pixel: the tap
        # copies of a block are then that much less redundant, and its broadcast load reads more.
        spread = max(1.0, share / pixels)
        options = []
        for k_tiles, copy_ch in tap_packings(rows, kernel, t.pe_rows):
            tk = ceil(rows * prod(kernel) / k_tiles)
            for min_blocks in (1, assumptions.value("gemm.max_block_groups")):
                shape = TensorEngineGemm(batch=ceil(p.groups / g_pack), m=g_pack * p.dst_ch, k=tk * k_tiles,
                                         n=pixels, a_transposed=p.weight_k_contiguous, k_tile=tk, a_blocks=g_pack,
                                         b_reuse=max(1, round(tk * k_tiles * pixels / (copy_ch * share))),
                                         b_copies=max(1.0, copy_ch / rows / spread), min_blocks=min_blocks,
                                         **bias, **kinds)
                options.append(_gemm(shape, ctx, p.weight, p.src, p.bias, p.out))
        phases.append(options)
    return phases


def tensor_kernel_gradient(ctx: OpContext, kg: KernelGradient) -> list[Emitter]:
    """grad_weight streamed over pixel tiles; candidates: group packings (1, and as many as the
    stationary columns hold) x tap packings of the input windows (fewer, taller transposes)."""
    t = ctx.target
    options = []
    for g_pack in sorted({1, min(kg.groups, max(1, t.stationary_free_max // kg.small_ch))}):
        for packing in tap_packings(g_pack * kg.big_ch, kg.kernel, t.partitions):
            options.append(lambda c, g_pack=g_pack, packing=packing: _kernel_gradient(c, kg, g_pack, *packing))
    return options


def _kernel_gradient(ctx: OpContext, kg: KernelGradient, g_pack: int, window_blocks: int, copy_ch: int) -> None:
    """grad_weight[M, N] = grad^T @ windows, contracted over pixels: K = 128 pixels per tile.

    Both operands sit in HBM channel-major, so each tile's [channels, 128 pixels] blocks are
    transposed on TensorE (grad_out once, the input once per tap window) and copied out of PSUM
    by VectorE and ScalarE in turn; the [M, N] sums accumulate in PSUM over every tile. The
    stream is software-pipelined: TensorE transposes tile group g before it multiplies group
    g-1, whose copies are done by then. ``g_pack`` groups share a tile (block-diagonal: only
    C's diagonal blocks are kept); ``copy_ch`` channels of shifted input copies (one broadcast
    load) let one transpose cover several taps (``window_blocks`` transposes per tile);
    grad_bias, when asked, is one more moving column of ones."""
    t, b = ctx.target, ctx.builder
    small, big, out = ctx.inputs[kg.small], ctx.inputs[kg.big], ctx.outputs[kg.out]
    dtype = tensor_engine_dtype(ctx, big.dtype)
    pixels = kg.batch * prod(kg.small_spatial)
    rows = min(t.pe_rows, pixels)
    m, big_rows = g_pack * kg.small_ch, g_pack * kg.big_ch
    n = big_rows * kg.taps + (kg.bias is not None)
    m_chunks, n_chunks = ceil(m / t.stationary_free_max), ceil(n / t.moving_free_max)
    # The sums stay in PSUM for a whole pass over the pixels; two banks are left for transposes.
    passes = ceil(m_chunks * n_chunks / (t.psum_banks - 2))
    packs = ceil(kg.groups / g_pack)
    tiles = ceil(pixels / rows) * packs * passes
    blocks = (ceil(m / t.partitions), window_blocks)        # transposes per tile: grad_out, windows
    staged = m + kg.taps * big_rows                         # transposed elements per pixel per tile
    banks = ceil(staged / (t.psum_bank_bytes // 4))
    # Bands of several tiles per DMA; each band of the input also reads the rows its windows
    # reach past it.
    partition_rows = ceil(m / t.partitions) * small.itemsize + ceil(copy_ch / t.partitions) * big.itemsize
    band = max(1, assumptions.value("stream.plane_bytes_per_partition") // (rows * partition_rows))
    halo = (kg.kernel[0] - 1) * kg.dilation[0] * prod(kg.big_spatial[1:]) * copy_ch * big.itemsize
    copies = copy_ch / big_rows
    big_per_pixel = prod(kg.big_spatial) / prod(kg.small_spatial)     # input positions per output one
    per_tile = (m * rows * small.itemsize, copy_ch * rows * big_per_pixel * big.itemsize + halo / band)
    staging = 2 * rows * staged * itemsize(dtype)
    band, pieces = _fit_bands(t.sbuf_usable_bytes - staging, band, per_tile)
    trs: list[int] = []
    pending: tuple = ()
    sizes = split_even(tiles, assumptions.value("gemm.max_block_groups"))
    for g, r in enumerate(sizes):
        war = (trs[g - 2],) if g >= 2 else ()         # double-buffered bands
        loads: tuple = ()
        for index, nbytes, ch, replicas, split in zip((kg.small, kg.big), per_tile, (m, copy_ch), (1, copies),
                                                      (1, pieces)):
            # The windows of a tile too big for SBUF come in ``pieces``; grad_out's tile is read
            # again for each piece (the spill: HBM traffic the on-chip plan could not avoid).
            nbytes, parts = ceil(nbytes * min(r, band) / split), min(ch, t.partitions)
            ready = ctx.ready_deps(index, g, len(sizes))
            if ready and replicas > 1:      # a fused producer left it in SBUF: replicate it there
                ready = (b.dma(ceil(nbytes * (1 - 1 / replicas)), src="sbuf", dst="sbuf", partitions=parts,
                               row_bytes=ceil(nbytes / parts), deps=ready, repeat=ceil(r / band) * split),)
            loads += ready or (b.dma(nbytes, src="hbm", dst="sbuf", partitions=parts, row_bytes=ceil(nbytes / parts),
                                     deps=war, repeat=ceil(r / band) * pieces, src_bytes=ceil(nbytes / replicas)),)
        tr = loads
        for count, ch in zip(blocks, (m, copy_ch)):
            tr = (b.matmul(k=min(ch, t.partitions), m=rows, n=min(ch, t.partitions), dtype=dtype, deps=tr,
                           repeat=r * count, opcode="nc_transpose"),)
        trs.append(tr[0])
        cps = tuple(b.compute(engine, "tensor_copy", free_size=ceil(staged / banks),
                              partitions=rows, out_dtype=dtype, src="psum", deps=tr, repeat=reps)
                    for engine, reps in (("vector", ceil(r * banks / 2)), ("scalar", r * banks // 2)) if reps)
        if pending:
            _accumulate(b, t, *pending, rows, m, n, dtype)
        pending = (cps, sizes[g])
    last = _accumulate(b, t, *pending, rows, m, n, dtype)
    evac = b.compute("vector", "tensor_copy", free_size=ceil(n / n_chunks), partitions=min(m, t.partitions),
                     src="psum", out_dtype=out.dtype, deps=(last,), repeat=packs * passes * m_chunks * n_chunks)
    if ctx.out_to_hbm[kg.out]:
        stored = out.nbytes + (ctx.outputs[kg.bias].nbytes if kg.bias is not None else 0)
        b.dma(stored, src="sbuf", dst="hbm", partitions=min(m, t.partitions), deps=(evac,),
              row_bytes=kg.big_ch * kg.taps * out.itemsize)
    ctx.set_ready(kg.out, (evac,))
    b.note_sbuf(2 * band * (per_tile[0] + per_tile[1] / pieces) + staging)
    b.note_psum(min(t.psum_banks, m_chunks * n_chunks + 2) * t.partitions * t.psum_bank_bytes)


def _fit_bands(room: float, band: int, per_tile: tuple) -> tuple[int, int]:
    """(tiles per band, pieces per tile's windows) whose double-buffered loads fit ``room`` bytes.

    Bands shrink first (more, smaller DMAs); a single tile that still overflows streams its
    input windows in pieces, as the compiler splits a free dimension that does not fit."""
    need = 2 * sum(per_tile)
    if band * need <= room:
        return band, 1
    if need <= room:
        return max(1, int(room // need)), 1
    windows_room = max(room - 2 * per_tile[0], room / 4)
    return 1, ceil(2 * per_tile[1] / windows_room)


def _accumulate(b, t, copies: tuple, tiles: int, rows: int, m: int, n: int, dtype: str) -> int:
    """One tile group's matmuls: stationary grad_out^T [pixels, M], moving windows^T [pixels, N]."""
    m_chunks, n_chunks = ceil(m / t.stationary_free_max), ceil(n / t.moving_free_max)
    return b.matmul(k=rows, m=ceil(m / m_chunks), n=ceil(n / n_chunks), dtype=dtype, deps=copies,
                    repeat=tiles * m_chunks * n_chunks)
