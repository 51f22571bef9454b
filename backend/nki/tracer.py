"""Running a kernel: each NKI call becomes one simulator instruction, with the dependencies its
data implies.

``KernelTracer`` is the state of one kernel run. Instructions go through the lowering layer's
``Builder`` (so their memory traffic is counted as every lowering's is) and their dependencies
come from the data, not from the program text:

- read after write, write after read and write after write on overlapping elements of the same
  tensor (tracked per tensor as boxes of elements, so loads into different slots of one tile do
  not wait for each other);
- an engine runs its stream in order, so a dependency on an earlier instruction of the same
  compute engine, or one the engine already waited for, is dropped (no semaphore to wait on);
- buffers: a tile allocated again at the same place in the kernel (a tile declared inside a
  loop) reuses one of ``buffers`` physical buffers, so writing it waits for whatever used that
  buffer last. One buffer serialises a loop's load behind the previous iteration's compute; two
  let it prefetch; ``None`` gives every allocation its own buffer (the compiler's best case).
  NKI leaves the count to its compiler; the default is the lowering layer's ``STREAM_BUFS``.
  ``site_buffers`` overrides it per allocation site: when the tiles do not fit SBUF or PSUM
  with ``buffers`` each, ``trace_into`` gives the largest ones a single buffer and traces again,
  as an allocator keeps what fits double-buffered.
- ``hoist``: an instruction equal to one already run on unchanged inputs is not run again (a
  compiler hoisting loop-invariant work), off by default: the kernel runs as written.
- DMA queues: every transfer one call site (an ``nl.load`` / ``nl.store`` / ``dma_copy`` in
  the source) issues goes to one DMA queue, in order; sites get queues in the order they first
  run, 16 a core. ASSUMPTION: the compiler triggers a loop body's DMA instruction from one
  engine sequencer, and the queue is tied to the trigger engine (nki-dma-overview); the NKI
  matmul tutorial's published times fit it (its hoisted loop's loads, independent but from
  one site, run at one transfer per ~1.3 us; the naive loop's two sites overlap).

At the end the tiles' footprint (per allocation site, its largest tile times its buffers) is
checked against SBUF and PSUM, as the NKI compiler's allocator would.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

from backend.lowering.builder import Builder
from backend.lowering.stream import STREAM_BUFS
from backend.nki.errors import nki_error
from backend.nki.indexing import box_contains, boxes_overlap, whole_box
from backend.nki.tensors import Tensor, View
from backend.sim.ir import COMPUTE_ENGINES

__all__ = ["KernelTracer", "TooManyBuffers", "current", "tracing", "DEFAULT_BUFFERS"]

DEFAULT_BUFFERS = STREAM_BUFS
_PACKAGE = str(Path(__file__).resolve().parent)
_STACK: list = []


def current() -> "KernelTracer":
    if not _STACK:
        raise nki_error("err_nki_api_outside_of_nki_kernel",
                        "NKI APIs can only be called inside a kernel: decorate the function with @nki.jit and call it")
    return _STACK[-1]


@contextmanager
def tracing(tracer: "KernelTracer"):
    _STACK.append(tracer)
    try:
        yield tracer
    finally:
        _STACK.pop()


def _call_site():
    """Where in the kernel source this call is (file, line, bytecode offset: two calls on one
    line are two sites): the allocation site of its tile."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno, frame.f_lasti) if frame is not None else ("?", 0, 0)


class KernelTracer:
    """One kernel run into ``builder.program``; ``values``: compute tile values as well as timing."""

    def __init__(self, builder: Builder, *, values: bool = True, buffers: int | None = DEFAULT_BUFFERS,
                 hoist: bool = False, site_buffers: dict | None = None):
        if buffers is not None and buffers < 1:
            raise ValueError(f"buffers must be >= 1 or None, got {buffers}")
        self.builder = builder
        self.target = builder.target
        self.program = builder.program
        self.values = values
        self.buffers = buffers
        self.site_buffers = dict(site_buffers or {})      # (site, memory) -> buffers there
        self.hoist = hoist
        self._waited = {e: set() for e in COMPUTE_ENGINES}
        self._dma_queues: dict = {}     # call site -> DMA queue
        self._sites: dict = {}          # site -> [tensors allocated there, in order]
        self._hoisted: dict = {}        # instruction key -> result tensor
        self.allocated: list = []       # on-chip tensors (for the footprint)
        self._keep: list = []           # tensors whose ids hoisting keys name
        self._shared_hbm: dict = {}     # site -> the HBM tensor every SPMD instance allocates there
        self.grid: tuple = ()           # SPMD launch grid and this instance's position in it
        self.program_ids: tuple = ()

    # -- memory ----------------------------------------------------------------------------
    def allocate(self, shape, dtype, memory: str, *, fill=None, name: str = "", site=None) -> Tensor:
        site = site or _call_site()
        if memory == "hbm" and self.grid:
            # shared_hbm: every instance of an SPMD launch allocating here gets the same tensor
            shared = self._shared_hbm.get(site)
            if shared is not None:
                return shared
        tensor = Tensor(shape, dtype, memory, site=site, values=self.values, fill=fill, name=name)
        if memory == "hbm":
            self._shared_hbm[site] = tensor
            return tensor
        if memory == "psum":
            bank = self.target.psum_bank_bytes
            per_block = tensor.bytes_per_partition // max(1, _blocks(tensor))
            if per_block > bank:
                raise nki_error("err_size_of_dimension_exceed_arch_limit",
                                f"PSUM tile {list(tensor.shape)} {tensor.dtype} needs {per_block} B per partition; "
                                f"a PSUM bank holds {bank} B (512 fp32, nl.tile_size.psum_fmax)")
        placed = self._sites.setdefault((site, memory), [])
        buffers = self.site_buffers.get((site, memory), self.buffers)
        if buffers is not None and len(placed) >= buffers:
            previous = placed[len(placed) - buffers]
            tensor.prior = {i for _, i, _ in previous.accesses} | previous.prior
        placed.append(tensor)
        self.allocated.append(tensor)
        return tensor

    # -- dependencies ----------------------------------------------------------------------
    def _deps(self, view: View, write: bool) -> set:
        t, box = view.tensor, view.box
        deps = {i for b, i, w in t.accesses if (w or write) and boxes_overlap(b, box)}
        if write and t.prior:
            deps |= t.prior
        return deps

    def _register(self, view: View, index: int, write: bool, engine: str) -> None:
        t, box = view.tensor, view.box
        if write:
            t.accesses = [a for a in t.accesses if not box_contains(box, a[0])]
            t.version += 1
            if box == whole_box(t.shape):
                t.prior = set()
        else:
            if t.producer is not None:
                t.producer = None
            if engine in COMPUTE_ENGINES:    # an in-order engine's later read covers its earlier one
                engines = self.program.instructions
                t.accesses = [a for a in t.accesses
                              if a[2] or a[0] != box or engines[a[1]].engine != engine]
        t.accesses.append((box, index, write))

    def _filter(self, engine: str, deps: set) -> tuple:
        if engine not in COMPUTE_ENGINES:
            return tuple(sorted(deps))
        instructions, waited = self.program.instructions, self._waited[engine]
        kept = {d for d in deps if instructions[d].engine != engine and d not in waited}
        waited |= kept
        return tuple(sorted(kept))

    def emit(self, kind: str, engine: str, reads, writes, **kwargs) -> int:
        """Add one instruction (``kind``: "compute", "matmul" or "dma") reading and writing views."""
        deps = set()
        for v in reads:
            deps |= self._deps(v, False)
        for v in writes:
            deps |= self._deps(v, True)
        deps = self._filter(engine, deps)
        b = self.builder
        if kind == "dma":
            index = b.dma(deps=deps, **kwargs)
        elif kind == "matmul":
            index = b.matmul(deps=deps, **kwargs)
        else:
            index = b.compute(engine, deps=deps, **kwargs)
        for v in reads:
            self._register(v, index, False, engine)
        for v in writes:
            self._register(v, index, True, engine)
        return index

    def dma_queue(self) -> int:
        """The DMA queue of the transfer the kernel is issuing: one per call site."""
        queues = self._dma_queues
        return queues.setdefault(_call_site(), len(queues) % self.target.dma_queues_per_engine)

    def produced(self, tensor: Tensor, index: int) -> Tensor:
        """Mark ``tensor`` as the unread result of instruction ``index`` (so an assignment may
        retarget the instruction to write its destination directly)."""
        tensor.producer = index
        return tensor

    def retarget(self, result: Tensor, dst: View) -> bool:
        """Make the instruction that produced ``result`` (if it was the last one and nobody read its
        result) write ``dst`` instead, as the NKI compiler does for ``t[...] = nl.load(...)``."""
        index = result.producer
        if index is None or index != len(self.program.instructions) - 1 or result.memory != dst.memory \
                or result.full().size != dst.size:
            return False
        ins = self.program.instructions[index]
        extra = set(self._deps(dst, True))
        extra.discard(index)
        ins.deps = tuple(sorted(set(ins.deps) | set(self._filter(ins.engine, extra))))
        result.accesses = [a for a in result.accesses if a[1] != index]
        self._register(dst, index, True, ins.engine)
        result.retargeted = True
        result.producer = None
        return True

    # -- hoisting --------------------------------------------------------------------------
    def hoisted(self, key, inputs):
        """The result of an equal instruction already run on unchanged inputs, when hoisting is on."""
        if not self.hoist:
            return None
        hit = self._hoisted.get(key)
        if hit is None:
            return None
        result, versions = hit
        if (result.version, *(v.tensor.version for v in inputs)) != versions:
            return None
        return result

    def remember(self, key, inputs, result: Tensor) -> None:
        if self.hoist:
            self._keep.extend(v.tensor for v in inputs)      # ids in keys stay those tensors'
            self._hoisted[key] = (result, (result.version, *(v.tensor.version for v in inputs)))

    @staticmethod
    def key(opcode: str, inputs, *attrs):
        """A hoisting key: the opcode, its attributes and which elements of which tensors it reads."""
        return (opcode, attrs, tuple((id(v.tensor), v.box) for v in inputs))

    # -- the end ---------------------------------------------------------------------------
    def footprint(self) -> dict:
        """Bytes per partition each allocation site holds: ``(site, memory) -> (tile bytes, buffers)``."""
        sites: dict = {}
        for t in self.allocated:
            if t.retargeted:
                continue
            key = (t.site, t.memory)
            count, largest = sites.get(key, (0, 0))
            sites[key] = (count + 1, max(largest, t.bytes_per_partition))
        out = {}
        for key, (count, largest) in sites.items():
            buffers = self.site_buffers.get(key, self.buffers)
            out[key] = (largest, count if buffers is None else min(count, buffers))
        return out

    def finish(self) -> None:
        """Check the tiles fit SBUF and PSUM and record the footprint on the program. Raises
        ``TooManyBuffers`` (naming the site to single-buffer) when fewer buffers would fit."""
        sites = self.footprint()
        t = self.target
        limits = {"sbuf": t.sbuf_partition_bytes, "psum": t.psum_bytes // t.partitions}
        for memory, limit in limits.items():
            mine = {k: v for k, v in sites.items() if k[1] == memory}
            need = sum(size * n for size, n in mine.values())
            if need <= limit or self.buffers is None:
                continue
            shrinkable = [(size * (n - 1), k) for k, (size, n) in mine.items() if n > 1]
            if shrinkable:
                raise TooManyBuffers(max(shrinkable)[1])
            what = "SBUF" if memory == "sbuf" else "PSUM (8 banks of %d B)" % t.psum_bank_bytes
            raise nki_error("err_out_of_memory",
                            f"the kernel's tiles need {need} B of {what} per partition even with one buffer per "
                            f"tile declared in a loop; {t.name} has {limit} B per partition")
        usage = {m: sum(size * n for (site, mem), (size, n) in sites.items() if mem == m) for m in limits}
        self.builder.note_sbuf(min(usage["sbuf"], limits["sbuf"]) * t.partitions)
        self.builder.note_psum(min(usage["psum"], limits["psum"]) * t.partitions)


class TooManyBuffers(Exception):
    """The tiles fit only with fewer buffers at ``site`` (a ``(site, memory)`` key)."""

    def __init__(self, site):
        super().__init__(site)
        self.site = site


def _blocks(tensor: Tensor) -> int:
    n = 1
    for size in tensor.shape[:tensor.partition_axis]:
        n *= size
    return n
