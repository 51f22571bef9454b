"""Blocked GEMM on TensorE: the plan (tiles, SBUF blocks, loop order) and its instructions.

TensorE computes ``stationary[K<=128, M<=128].T @ moving[K, N<=512]`` into a PSUM bank, so
both operands need K on the partition axis. An operand stored with K contiguous (row-major
A[M, K], or a weight used as W.t()) is loaded row-wise and transposed on TensorE in 128x128
blocks. Output tiles accumulate over K in PSUM; when K does not fit one SBUF block, partial
sums are added into an fp32 SBUF accumulator on VectorE (the NKI tutorial's K-blocking).

The plan picks SBUF block sizes (tiles of M, N, K per block) and the loop order within the SBUF
budget: closed-form estimates over TensorE, DMA and VectorE/ScalarE work rank the plans, and the
best few are simulated, so a large GEMM reuses its stationary and moving blocks and keeps
TensorE fed (naive per-tile loading would be DMA-bound) while a small one gets blocks that
pipeline. Blocks are emitted in at most ``gemm.max_block_groups``
groups with repeat counts, so the simulator's cost stays bounded for any GEMM size. The
blocking knobs are modelling assumptions with plausible ranges (``backend.sim.assumptions``).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from backend.lowering.builder import Builder, OpContext, dma_engines_for, itemsize, split_even
from backend.sim import assumptions
from backend.sim.costs import instruction_ns
from backend.sim.costs.dma import dma_engine_ns
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.ir import Instruction, Program
from backend.sim.presets import NeuronConfig
from backend.sim.scheduler import Simulator

__all__ = ["TensorEngineGemm", "BlockedGemmPlan", "plan_blocked_gemm", "emit_gemm"]


@dataclass(frozen=True)
class TensorEngineGemm:
    """C[batch, M, N] = A[batch, M, K] @ B[batch, K, N] (+ bias), as TensorE sees it."""

    batch: int
    m: int
    k: int
    n: int
    dtype: str
    out_dtype: str
    a_transposed: bool = False      # A stored K-contiguous: needs TensorE transposes
    b_transposed: bool = False      # B stored K-contiguous ([N, K]): needs TensorE transposes
    bias: str = "none"              # "none", "row" (bias[N] broadcast), "partition" (bias[M]) or "full" (beta * C)
    bias_dtype: str = "float32"
    k_tile: int = 0                 # K chunk per matmul when K is structured (conv: channels per tap)
    b_reuse: int = 1                # B's SBUF bytes are K*N*itemsize / b_reuse (conv: taps reuse input)
    b_copies: float = 1.0           # B is loaded as b_copies replicas of what crosses HBM (conv:
                                    # input copies shifted to stack taps on partitions)
    a_blocks: int = 1               # A is block-diagonal (grouped conv): 1/a_blocks of it crosses HBM
    min_blocks: int = 1             # split N into at least this many SBUF blocks, so loads, matmuls and
                                    # stores of different blocks overlap (conv tries both)
    load_dtype: str | None = None   # A and B in HBM when the load DMA casts them to ``dtype`` (auto-cast)


@dataclass(frozen=True)
class BlockedGemmPlan:
    tm: int
    tk: int
    tn: int
    m_tiles: int                     # tiles emitted along M, K, N (blocks x tiles per block)
    k_tiles: int
    n_tiles: int
    bm: int                          # tiles per block along M, K, N
    bk: int
    bn: int
    m_outer: bool                    # loop order: M blocks outside N blocks
    traffic_bytes: int
    sbuf_bytes: int
    estimate_ns: float               # the pipelined closed-form estimate (not the simulated time)

    @property
    def n_mb(self) -> int:
        return ceil(self.m_tiles / self.bm)

    @property
    def n_nb(self) -> int:
        return ceil(self.n_tiles / self.bn)

    @property
    def n_kb(self) -> int:
        return ceil(self.k_tiles / self.bk)


def _tiles(extent: int, limit: int) -> tuple[int, int]:
    """(count, even size) of tiles no larger than ``limit`` covering ``extent``."""
    count = max(1, ceil(extent / limit))
    return count, ceil(extent / count)


def _pow2_upto(limit: int) -> list[int]:
    out, v = [], 1
    while v < limit:
        out.append(v)
        v *= 2
    return out + [limit]


def _unit_ns(target: NeuronConfig, **kw) -> float:
    return instruction_ns(Instruction(**kw), target)


def _dma_busy_ns(target: NeuronConfig, nbytes: int, rows: int, row_bytes: int, src: str, dst: str) -> float:
    """Engine-ns one transfer of ``rows`` rows keeps the DMA engines busy (summed over them)."""
    engines = dma_engines_for(min(rows, target.partitions), target)
    return engines * dma_engine_ns(nbytes, ceil(nbytes / max(1, row_bytes)), engines, src, dst, target)


def _block_rows(shape: TensorEngineGemm, operand: str, width: int, bk: int, tk: int, s_hbm: int) -> tuple[int, int]:
    """(rows, bytes per row) one block of operand ``"a"`` or ``"b"`` arrives in; ``width`` is its
    non-K extent in the block. A K-contiguous operand comes row-wise (one row per non-K index),
    the others K-row-wise. A vector (non-K extent 1, K unstructured) puts each partition's K
    elements in one run: which K indices share a partition is free, as long as the other
    operand's K rows follow the same order, and those are whole rows either way."""
    transposed, extent = (shape.a_transposed, shape.m) if operand == "a" else (shape.b_transposed, shape.n)
    plain = shape.a_blocks == 1 if operand == "a" else shape.b_reuse == 1 and shape.b_copies == 1
    if transposed:
        return width, bk * tk * s_hbm
    if extent == 1 and plain and not shape.k_tile:
        return tk, bk * s_hbm
    return bk * tk, width * s_hbm


def _psum_copy_ns(target: NeuronConfig, blocks: int, part: int, free: int) -> float:
    """ScalarE time to copy one operand block's transposes out of PSUM (as ``_load_operand`` does)."""
    psum_tiles = assumptions.value("gemm.psum_tiles_per_group")
    return ceil(blocks / psum_tiles) * _unit_ns(target, engine="scalar", opcode="tensor_copy", partitions=free,
                                                free_size=min(blocks, psum_tiles) * part, dtype="float32",
                                                src="psum")


@assumptions.cached(maxsize=4096)
def plan_blocked_gemm(shape: TensorEngineGemm, target: NeuronConfig, reserved_bytes: int = 0) -> BlockedGemmPlan:
    """Choose tiles, SBUF blocks and loop order within the SBUF budget: the budget fraction of
    what ``reserved_bytes`` (values a fused kernel keeps resident) leave.

    Closed-form estimates rank the plans; the best few by each estimate are then simulated
    alone (operands in HBM), as a compiler's autotuner times its variants, and the fastest wins.
    Estimates alone misrank plans whose pipeline fill, per-DMA costs or engine spread differ,
    and a misranked plan makes a GEMM slower than a slightly larger one."""
    ranked = _ranked_plans(shape, target, reserved_bytes)
    per_estimate = int(assumptions.value("gemm.simulated_plans"))
    candidates = []
    for order in (0, 1):            # by the pipelined estimate, then by the roofline one
        for plan in (entry[-1] for entry in sorted(ranked, key=lambda e: e[order])[:per_estimate]):
            if plan not in candidates:
                candidates.append(plan)
    if len(candidates) == 1:
        return candidates[0]
    return min(candidates, key=lambda plan: (_alone_ns(shape, plan, target), candidates.index(plan)))


def _alone_ns(shape: TensorEngineGemm, plan: BlockedGemmPlan, target: NeuronConfig) -> float:
    """Simulated time of the GEMM under ``plan``, its operands in HBM and its output stored."""
    lead = (shape.batch,)
    record = OpRecord(0, "gemm_plan", (TensorDesc((*lead, shape.m, shape.k), shape.load_dtype or shape.dtype),
                                       TensorDesc((*lead, shape.k, shape.n), shape.load_dtype or shape.dtype)),
                      (TensorDesc((*lead, shape.m, shape.n), shape.out_dtype),), {})
    program = Program("gemm_plan")
    emit_gemm(OpContext(record, target, Builder(program, target)), shape, plan, 0, 1, None)
    return Simulator(target).schedule(program).end_ns


def _ranked_plans(shape: TensorEngineGemm, target: NeuronConfig, reserved_bytes: int) -> list[tuple]:
    """Every plan within the SBUF budget as ``(pipelined key, roofline key, plan)``.

    A plan splits each dimension into blocks of tiles; the tiles are then sized to blocks x
    tiles per block, so blocking never pads: 3 M tiles in blocks of 2 are 4 tiles of a quarter
    of M, not 4 tiles of a third of it."""
    m_tiles, _ = _tiles(shape.m, target.stationary_free_max)
    k_tiles, tk_even = _tiles(shape.k, min(shape.k_tile or target.pe_rows, target.pe_rows))
    n_tiles, _ = _tiles(shape.n, target.moving_free_max)
    s, s_out = itemsize(shape.dtype), itemsize(shape.out_dtype)
    s_hbm = itemsize(shape.load_dtype or shape.dtype)
    budget = assumptions.value("gemm.sbuf_budget_fraction") * max(0, target.sbuf_usable_bytes - reserved_bytes)
    first_share = 1.0 if target.vector_scalar_share_psum else 0.5
    a_total, b_total = shape.m * shape.k * s_hbm // shape.a_blocks, shape.k * shape.n * s_hbm // shape.b_reuse
    out_total = shape.m * shape.n * s_out
    groups, k_steps = assumptions.value("gemm.max_block_groups"), assumptions.value("gemm.max_k_steps")
    ranked = []
    for bm_max in _pow2_upto(m_tiles):
        for bn_max in _pow2_upto(n_tiles):
            for bk_max in [k_tiles] + [v for v in _pow2_upto(k_tiles) if v < k_tiles][::-1]:
                n_mb, n_nb, n_kb = ceil(m_tiles / bm_max), ceil(n_tiles / bn_max), ceil(k_tiles / bk_max)
                # Even blocks: every block is emitted full, its tiles sized to cover the dimension.
                bm, bn, bk = ceil(m_tiles / n_mb), ceil(n_tiles / n_nb), ceil(k_tiles / n_kb)
                tm, tn = ceil(shape.m / (n_mb * bm)), ceil(shape.n / (n_nb * bn))
                # K structured by the caller (conv: channels per tap) keeps its tiles
                tk = tk_even if shape.k_tile else ceil(shape.k / (n_kb * bk))
                mt, kt, nt = n_mb * bm, n_kb * bk, n_nb * bn        # tiles emitted
                a_blk, b_blk = bk * tk * bm * tm * s, bk * tk * bn * tn * s // shape.b_reuse
                out_blk = bm * tm * bn * tn
                # (the transposed copies' second buffer, for the step prepared ahead, is not counted:
                # the plan's SBUF budget fraction leaves room for it)
                footprint = (2 * (a_blk + b_blk) + a_blk * shape.a_transposed + b_blk * shape.b_transposed
                             + (out_blk * 4 if n_kb > 1 else 0) + 2 * out_blk * s_out)
                if footprint > budget and not (bm == bn == bk == 1):
                    continue
                mm_ns, tr_ns, evac_ns = _tile_costs(target, shape.dtype, tm, tk, tn)
                for m_outer in (True, False):
                    if n_kb == 1:
                        a_loads, b_loads = (1, n_mb) if m_outer else (n_nb, 1)
                    else:
                        a_loads, b_loads = n_nb, n_mb
                    traffic = shape.batch * (a_total * a_loads + b_total * b_loads + out_total)
                    transposes = shape.batch * (mt * kt * a_loads * shape.a_transposed
                                                + nt * kt * b_loads * shape.b_transposed)
                    tensor = shape.batch * mt * kt * nt * mm_ns + transposes * tr_ns
                    # First-pass evacuations and the transposed blocks' copies out of PSUM
                    # alternate VectorE/ScalarE (unless they share the PSUM port); K-block
                    # accumulations are VectorE adds.
                    a_blocks, b_blocks = shape.batch * a_loads * n_mb * n_kb, shape.batch * b_loads * n_nb * n_kb
                    copies = (a_blocks * shape.a_transposed * _psum_copy_ns(target, bm * bk, tm, tk)
                              + b_blocks * shape.b_transposed * _psum_copy_ns(target, bn * bk * ceil(tn / tk), tk, tk))
                    evac = shape.batch * mt * nt * (n_kb - 1 + first_share) * evac_ns + first_share * copies
                    # DMA: every engine's busy time (descriptor costs and engine spread included)
                    # shared by all engines.
                    a_rows, a_row = _block_rows(shape, "a", bm * tm, bk, tk, s_hbm)
                    b_rows, b_row = _block_rows(shape, "b", bn * tn, bk, tk, s_hbm)
                    dma = (a_blocks * _dma_busy_ns(target, a_blk * s_hbm // s // shape.a_blocks, a_rows, a_row, "hbm", "sbuf")
                           + b_blocks * _dma_busy_ns(target, max(int(b_blk / shape.b_copies * s_hbm / s), b_blk),
                                                     b_rows, b_row, "hbm", "sbuf")
                           + shape.batch * n_mb * n_nb * _dma_busy_ns(target, out_blk * s_out, bm * tm, bn * tn * s_out,
                                                                      "sbuf", "hbm")
                           ) / target.dma_engines
                    stages = (tensor, dma, evac)
                    roofline = max(stages)
                    # Steps run as a pipeline (loads of one step overlap the matmuls and
                    # evacuations of the one before): the slowest stage, plus the other stages'
                    # share of one step for the fill and drain (a single block overlaps nothing).
                    # Double buffering closes a cycle every two steps: a step's loads wait for the
                    # matmuls two steps back, then the DMA start latency, the loads and the matmuls.
                    steps = min(shape.batch * n_mb * n_nb, groups) * min(n_kb, k_steps)
                    cycle = (steps * target.dma_fixed_latency_ns + dma + tensor) / 2
                    pipelined = max(roofline, cycle) + (sum(stages) - roofline) / steps
                    short = max(0, shape.min_blocks - shape.batch * n_nb)
                    plan = BlockedGemmPlan(tm, tk, tn, mt, kt, nt, bm, bk, bn, m_outer, int(traffic), int(footprint),
                                           pipelined)
                    ranked.append(((short, pipelined, traffic, n_kb, -bm * bn, len(ranked)),
                                   (short, roofline, traffic, n_kb, -bm * bn, len(ranked)), plan))
    return ranked


def _tile_costs(target: NeuronConfig, dtype: str, tm: int, tk: int, tn: int) -> tuple[float, float, float]:
    """ns of one matmul, one transpose and one PSUM evacuation of a (tm, tk, tn) tile."""
    return (_unit_ns(target, engine="tensor", opcode="nc_matmul", free_size=tn, stationary_free=tm, dtype=dtype),
            _unit_ns(target, engine="tensor", opcode="nc_transpose", free_size=tm, stationary_free=tk, dtype=dtype),
            _unit_ns(target, engine="vector", opcode="tensor_tensor", free_size=tn, dtype="float32",
                     attrs={"psum_input": True}))


def emit_gemm(ctx: OpContext, shape: TensorEngineGemm, plan: BlockedGemmPlan, a: int, b: int,
              bias: int | None, out: int = 0) -> None:
    """Emit the blocked GEMM; ``a``/``b``/``bias``/``out`` are operand positions in the record."""
    bld, t = ctx.builder, ctx.target
    s, s_out = itemsize(shape.dtype), itemsize(shape.out_dtype)
    s_hbm = itemsize(shape.load_dtype or shape.dtype)
    tm, tk, tn = plan.tm, plan.tk, plan.tn
    n_mb, n_nb, n_kb = plan.n_mb, plan.n_nb, plan.n_kb
    a_blk_bytes = plan.bk * tk * plan.bm * tm * s
    b_blk_bytes = plan.bk * tk * plan.bn * tn * s // shape.b_reuse
    out_tiles = plan.bm * plan.bn
    psum_tiles = assumptions.value("gemm.psum_tiles_per_group")    # two groups in flight = 8 banks
    bias_ids: tuple = ()
    if bias is not None and shape.bias == "row":
        row = tn * plan.bn * itemsize(shape.bias_dtype)
        bias_ids = ctx.ready_deps(bias) or (bld.dma(t.partitions * row, src="hbm", dst="sbuf", row_bytes=row,
                                                    src_bytes=shape.n * itemsize(shape.bias_dtype)),)
    elif bias is not None and shape.bias == "partition":
        # One value per output partition: the first evacuation adds it at no extra cost (ScalarE
        # activation's bias operand, VectorE tensor_scalar).
        size = itemsize(shape.bias_dtype)
        bias_ids = ctx.ready_deps(bias) or (bld.dma(shape.batch * shape.m * size, src="hbm", dst="sbuf",
                                                    partitions=min(tm, t.partitions), row_bytes=size),)
    row_bias = bool(bias_ids) and shape.bias == "row"
    blocks = shape.batch * n_mb * n_nb
    outer_n, inner_n = (n_mb, n_nb) if plan.m_outer else (n_nb, n_mb)

    def loads_in(start: int, count: int) -> tuple[int, int]:
        """A and B block loads needed by blocks [start, start+count) of the loop nest."""
        if n_kb > 1:
            return count, count
        firsts = sum(1 for i in range(start, start + count) if i % inner_n == 0)
        return (firsts, count) if plan.m_outer else (count, firsts)

    evac_hist: list[int] = []     # evacuation entries in order, for PSUM bank reuse
    store_hist: list[int] = []
    acc_prev: dict[int, int] = {}
    start, ready_a, ready_b = 0, ctx.ready_deps(a), ctx.ready_deps(b)
    ready_a_step, ready_b_step = ready_a, ready_b
    # Rows and row bytes as an operand block arrives: K-contiguous operands come row-wise.
    a_rows, a_row = _block_rows(shape, "a", plan.bm * tm, plan.bk, tk, s_hbm)
    b_rows, b_row = _block_rows(shape, "b", plan.bn * tn, plan.bk, tk, s_hbm)
    cast = s_hbm / s                # HBM bytes per SBUF byte of an operand block
    steps = []                    # (group, blocks in it, A loads, B loads, K group, K blocks in it)
    for g, r in enumerate(split_even(blocks, assumptions.value("gemm.max_block_groups"))):
        a_loads, b_loads = loads_in(start, r)
        start += r
        steps += [(g, r, a_loads, b_loads, kg, kr)
                  for kg, kr in enumerate(split_even(n_kb, assumptions.value("gemm.max_k_steps")))]
    last_kg = {g: kg for g, _, _, _, kg, _ in steps}

    def prepare(i: int) -> tuple[tuple, tuple]:
        """Load (and transpose) the operand blocks of step ``i``. Double-buffered: a load waits
        until step ``i - 2`` is done with its buffer -- its transposes for an operand transposed
        on TensorE (whose transposed copy has buffers of its own), else its matmuls."""
        _, r, a_loads, b_loads, _, kr = steps[i]
        mm_war = (step_mm[i - 2],) if i >= 2 else ()
        ids = []
        for index, transposed, loads, blk_bytes, rows, row, blocks, part, free, ready, copies in (
                (a, shape.a_transposed, a_loads, a_blk_bytes // shape.a_blocks, a_rows, a_row, plan.bm * plan.bk,
                 tm, tk, ready_a, 1.0),
                (b, shape.b_transposed, b_loads, b_blk_bytes, b_rows, b_row, plan.bn * plan.bk * ceil(tn / tk),
                 tk, tk, ready_b, shape.b_copies)):
            war = step_raw_free[i - 2].get(index, mm_war) if i >= 2 else ()
            loaded, raw_free = _load_operand(ctx, index, loads * kr, blk_bytes, cast, rows, row, transposed, blocks,
                                             part, free, shape.dtype, war, ready, copies, copy_war=mm_war)
            if raw_free is not None:
                step_raw_free[i][index] = (raw_free,)
            ids.append(loaded)
        return ids[0], ids[1]

    # TensorE runs its queue in order: operands transposed on it are prepared one step ahead
    # (software pipelining), so the next step's transposes run while this step's transposed
    # blocks are copied out of PSUM, instead of waiting behind this step's matmuls.
    ahead = 1 if (shape.a_transposed or shape.b_transposed) else 0
    step_mm: list[int] = []       # last matmul of each step
    step_raw_free: list[dict] = [{} for _ in steps]   # operand -> its transposes, per step
    prepared = {i: prepare(i) for i in range(min(ahead, len(steps)))}
    last_evacs: list[int] = []
    for i, (g, r, _, _, kg, kr) in enumerate(steps):
        a_ids, b_ids = prepared.pop(i) if i in prepared else prepare(i)
        if ahead and i + 1 < len(steps):
            prepared[i + 1] = prepare(i + 1)
        if kg == 0:
            last_evacs = []
        if a_ids:
            ready_a_step = a_ids
        if b_ids:
            ready_b_step = b_ids
        first, last = kg == 0, kg == last_kg[g]
        subs = split_even(ceil(out_tiles / psum_tiles), assumptions.value("gemm.max_psum_groups_per_step"))
        tiles_left = out_tiles
        for j, n_groups in enumerate(subs):
            tiles = min(tiles_left, n_groups * psum_tiles)
            tiles_left -= tiles
            bank_war = (evac_hist[-2],) if len(evac_hist) >= 2 else ()
            mm = bld.matmul(k=tk, m=tm, n=tn, dtype=shape.dtype, repeat=r * kr * plan.bk * tiles,
                            deps=(*ready_a_step, *ready_b_step, *bank_war))
            deps = [mm, *bias_ids]
            if j in acc_prev and not first:
                deps.append(acc_prev[j])
            if last and len(store_hist) >= 2:
                deps.append(store_hist[-2])
            accumulate = n_kb > 1 and not first
            engine = "vector" if (accumulate or row_bias or j % 2 == 0) else "scalar"
            opcode = "tensor_tensor" if (accumulate or row_bias) else (
                ("tensor_scalar" if bias_ids else "tensor_copy") if engine == "vector" else "activation")
            ev = bld.compute(engine, opcode, free_size=tn, partitions=tm, dtype="float32",
                             out_dtype=shape.out_dtype if last else "float32", src="psum",
                             n_inputs=1, deps=deps, repeat=r * kr * tiles, psum_input=True, alu="add")
            evac_hist.append(ev)
            acc_prev[j] = ev
            if last:
                last_evacs.append(ev)
        step_mm.append(mm)
        if not last:
            continue
        if ctx.out_to_hbm[out] if out < len(ctx.out_to_hbm) else True:
            rows, row_bytes = plan.bm * tm, plan.bn * tn * s_out
            store_hist.append(bld.dma(rows * row_bytes, src="sbuf", dst="hbm", partitions=min(rows, t.partitions),
                                      row_bytes=row_bytes, deps=last_evacs, repeat=r))
        else:
            store_hist.append(last_evacs[-1])
        ctx.set_ready(out, last_evacs[-1:])
    bld.note_sbuf(plan.sbuf_bytes)
    bld.note_psum(2 * psum_tiles * t.partitions * t.psum_bank_bytes)


def _load_operand(ctx: OpContext, index: int, loads: int, block_bytes: int, cast: float, rows: int, row_bytes: int,
                  transposed: bool, blocks: int, part: int, free: int, dtype: str, war: tuple,
                  ready: tuple, copies: float = 1.0, copy_war: tuple = ()) -> tuple[tuple, int | None]:
    """DMA one operand block into SBUF (unless resident) and transpose it on TensorE if needed.
    Returns (what the matmuls wait for, the transposes after which the loaded block's buffer is
    free -- None when the matmuls read it directly). ``copy_war``: what the copy out of PSUM
    into the transposed block's own buffer waits for.

    ``cast`` is HBM bytes per SBUF byte: an auto-cast fp32 operand is read at 4 bytes and lands
    in SBUF at 2 (the DMA engine converts on the fly). A block of ``copies`` replicas is one
    broadcast load: the engines write every replica, the source is read once."""
    if loads == 0:
        return (), None
    bld, t = ctx.builder, ctx.target
    if ready:
        ids = ready
        if copies > 1:          # resident already: replicate it SBUF to SBUF
            ids = (bld.dma(int(block_bytes * (1 - 1 / copies)), src="sbuf", dst="sbuf",
                           partitions=min(rows, t.partitions), row_bytes=row_bytes, deps=ids, repeat=loads),)
    else:
        # K-contiguous operands arrive row-wise (rows of the non-K dim), others K-row-wise.
        hbm_bytes = int(block_bytes / copies * cast)
        ids = (bld.dma(max(hbm_bytes, block_bytes), src="hbm", dst="sbuf", partitions=min(rows, t.partitions),
                       row_bytes=row_bytes, deps=war, repeat=loads, src_bytes=hbm_bytes, dst_bytes=block_bytes),)
    if not transposed:
        return ids, None
    tr = bld.matmul(k=part, m=free, n=part, dtype=dtype, deps=ids, repeat=loads * blocks, opcode="nc_transpose")
    psum_tiles = assumptions.value("gemm.psum_tiles_per_group")
    copies = ceil(blocks / psum_tiles)
    # Copies out of PSUM are shared between ScalarE and VectorE, as the GEMM's evacuations are,
    # where the two engines read PSUM independently (NC-v3); on NC-v2 they share one port.
    total = loads * copies
    engines = ("scalar",) if t.vector_scalar_share_psum or total < 2 else ("scalar", "vector")
    return tuple(bld.compute(engine, "tensor_copy", free_size=min(blocks, psum_tiles) * part, partitions=free,
                             dtype="float32", out_dtype=dtype, src="psum", deps=(tr, *copy_war), repeat=n)
                 for engine, n in zip(engines, split_even(total, len(engines)))), tr
