"""The NeuronCore scheduler: in-order engine streams, DMA queues, dependencies, timing.

Each compute engine runs its instructions in program order in its own clock domain (costs
arrive in ns, converted from that engine's cycles). An instruction starts when its engine is
free and every instruction it depends on has finished; a dependent instruction pays the
~100-cycle semaphore wait once per entry. DMA transfers start ~1.3 us after their trigger on
the engines (of 16) that can start them soonest; queued transfers hide that latency behind the
previous transfer. On cores with hardware DGE (NC-v3 on), each DMA instruction is first
issued (descriptor generation, ~600 ns) by one of a few issuing queues, one instruction at a
time per queue: issue overlaps the start latency and other transfers, so it bounds how fast
small DMAs can follow each other rather than adding to every transfer. Each engine serves its
16 queues round robin, so a transfer is not held behind an unrelated one issued earlier (a
store waiting for compute does not block the next prefetch): a DMA engine is modelled as a
timeline where a transfer takes the first free gap. A queue runs its own transfers in order, a
transfer starting no sooner than the previous one ends nor than ``dma.queue_transfer_ns`` after
it started (the per-transfer setup and semaphore that limit small transfers); that pacing
applies where the program names a transfer's queue (``Instruction.dma_queue``: an NKI
kernel's call sites), not where the compiler chooses queues. NC-v2 port conflicts (VectorE/GpSimdE on
SBUF, VectorE/ScalarE on PSUM) serialise the engines that share a port.

One pass over the instructions, O(n) with a 16-entry DMA scan: a GPT-2-sized op stream
simulates in seconds. Programs run back to back; host dispatch (launch overhead) runs ahead
asynchronously until a program marked ``sync`` makes the host wait for the device. A program
is scheduled relative to its own start (``Schedule``) and then shifted to where it runs, so an
equal program seen again reuses its schedule (``backend.sim.schedule_cache``) at a cost that does
not depend on its size.

Compiled kernels (kind ``"kernel"``) that follow a compiled kernel prefetch: their
dependency-free HBM->SBUF loads, up to ``info.prefetch_bytes`` (inputs the previous kernel does
not produce) and the SBUF the previous kernel leaves free, may start as soon as the kernel is
launched while the previous kernel still computes, on the DMA engines it leaves idle. Eager
ops never do: each op's loads wait for the op before it.
"""
from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, fields
from operator import attrgetter

import backend.sim.assumptions as assumptions

from backend.sim.costs import instruction_ns
from backend.sim.ir import COMPUTE_ENGINES, Program
from backend.sim.overlap import CollectiveLane
from backend.sim.presets import DEFAULT_NEURON_TARGET, NeuronConfig, get_target
from backend.sim.trace import TRAFFIC_FIELDS, OpSummary, Trace, engine_class

__all__ = ["Simulator", "Schedule", "engine_tracks"]

log = logging.getLogger(__name__)


def _finish_then_engine(run: tuple) -> tuple:
    return run[0], run[1]


class _Timeline:
    """Busy intervals of one DMA engine or issuing queue, sorted and disjoint; work takes the first gap."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def earliest(self, ready: float, duration: float) -> tuple[float, int]:
        i = bisect_right(self.ends, ready)
        begin = ready
        while i < len(self.starts) and self.starts[i] - begin < duration:
            begin = max(begin, self.ends[i])
            i += 1
        return begin, i

    def reserve(self, begin: float, duration: float, at: int) -> None:
        self._insert(begin, begin + duration, at)

    def _insert(self, begin: float, end: float, at: int) -> None:
        """Insert [begin, end) before index ``at``, merged with neighbours it touches: back-to-back
        transfers keep the list short, so finding a gap stays cheap on a long busy run."""
        starts, ends = self.starts, self.ends
        if at and ends[at - 1] == begin:
            if at < len(starts) and starts[at] == end:      # closes the gap between two intervals
                ends[at - 1] = ends[at]
                del starts[at], ends[at]
            else:
                ends[at - 1] = end
        elif at < len(starts) and starts[at] == end:
            starts[at] = begin
        else:
            starts.insert(at, begin)
            ends.insert(at, end)

    def spread(self, ready: float, duration: float) -> list[tuple[float, float]]:
        """Pieces ``(begin, end)`` of ``duration`` ns of work from ``ready`` on, taking every gap
        it finds: the engine serves its queues round robin a descriptor at a time, so a transfer
        interleaves with other queues' transfers instead of waiting for one unbroken slot."""
        pieces, left, t = [], duration, ready
        starts, ends = self.starts, self.ends
        i, n = bisect_right(ends, ready), len(starts)
        while True:
            while i < n and starts[i] <= t:
                t = max(t, ends[i])
                i += 1
            if i == n or starts[i] - t >= left:
                pieces.append((t, t + left))
                return pieces
            pieces.append((t, starts[i]))
            left -= starts[i] - t
            t = ends[i]
            i += 1

    def reserve_pieces(self, pieces: list[tuple[float, float]]) -> None:
        for begin, end in pieces:
            self._insert(begin, end, bisect_left(self.starts, begin))

    def forget_before(self, ns: float) -> None:
        """Drop intervals that end by ``ns`` (nothing placed later can use them)."""
        done = bisect_right(self.ends, ns)
        del self.starts[:done], self.ends[:done]


@dataclass(slots=True)
class _DmaState:
    """DMA engine and issuing-queue timelines of the last program, with what a
    following compiled kernel needs to prefetch beside it."""

    kind: str
    start_ns: float
    sbuf_peak_bytes: int
    lines: list
    issuers: list


@dataclass(frozen=True, slots=True)
class Schedule:
    """One program's timing relative to its start: what ``Simulator.feed`` adds to the trace.

    Times are ns after the program starts, so a schedule computed once serves every later run of
    an equal program (``feed(program, schedule)``) with bit-identical results.
    events: ``(begin_ns, end_ns, track, opcode, bytes_moved, flops)`` per trace event.
    """

    end_ns: float
    events: tuple
    busy_ns: dict
    instruction_counts: dict
    instruction_count: int
    traffic: dict
    hardware_flops: int
    collective: bool


# Every field of an OpSummary, in its constructor's order (it has slots, no init=False fields).
_summary_fields = attrgetter(*(f.name for f in fields(OpSummary)))


def _copy_summary(info: OpSummary) -> OpSummary:
    """A shallow copy of a rollup (``dataclasses.replace`` costs several times more per op)."""
    return OpSummary(*_summary_fields(info))


def engine_tracks(target: NeuronConfig) -> tuple:
    """Timeline tracks in display order: compute engines, DMA engines, host."""
    return (*COMPUTE_ENGINES, *(f"dma{q}" for q in range(target.dma_engines)), "host")


class Simulator:
    """``Simulator(target).run(program) -> Trace``; ``feed`` appends programs to one trace."""

    def __init__(self, target: str | NeuronConfig = DEFAULT_NEURON_TARGET, max_events: int = 200_000):
        self.target = get_target(target, kind="neuron")
        self.max_events = max_events
        self._dma_names = tuple(f"dma{q}" for q in range(self.target.dma_engines))
        self.reset()

    # -- state --------------------------------------------------------------------------------
    def reset(self) -> None:
        t = self.target
        self.trace = Trace(target=t.name, device_kind="neuron", peak_flops_per_s=t.peak_flops_per_s,
                           hbm_bytes_per_s=t.hbm_bytes_per_s, max_events=self.max_events,
                           engines=engine_tracks(t))
        self._device_free_ns = 0.0
        self._host_ns = 0.0
        self._last_dma: _DmaState | None = None

    @property
    def now_ns(self) -> float:
        """When the device finishes everything fed so far."""
        return self._device_free_ns

    def run(self, programs: Program | Iterable[Program]) -> Trace:
        """Simulate programs back to back from a fresh state and return their trace."""
        self.reset()
        for program in [programs] if isinstance(programs, Program) else programs:
            self.feed(program)
        return self.trace

    # -- one program --------------------------------------------------------------------------
    def feed(self, program: Program, schedule: Schedule | None = None, *,
             lane: CollectiveLane | None = None, **info) -> OpSummary:
        """Simulate one program after everything fed before; append its events and rollup.

        ``schedule``: the program's ``schedule(program)`` computed earlier (an op seen before),
        reused instead of scheduling again. ``info`` overrides fields of the program's rollup
        that differ between equal programs (``source``). With ``lane``, the program is a
        collective: it runs on that lane once the compute fed before it has finished, and compute
        fed after it does not wait for it (``backend.sim.overlap``).
        """
        self._host_ns += program.info.launch_overhead_ns
        start_ns = max(self._device_free_ns, self._host_ns)
        if lane is not None:
            start_ns = lane.start(start_ns)
        summary = _copy_summary(program.info)
        summary.op_index, summary.start_ns, summary.end_ns = len(self.trace.ops), start_ns, start_ns
        summary.busy_ns, summary.instruction_counts, summary.nodes = {}, {}, tuple(summary.nodes)
        for key, value in info.items():
            setattr(summary, key, value)
        if program.instructions:
            early_ns, prefetch_bytes = self._prefetch_window(program)
            if schedule is None and program.kind == "kernel":
                # Kernels may share the previous kernel's DMA timelines (prefetch): absolute times.
                self._check_capacity(program)
                schedule, lines, issuers = self._schedule(program, start_ns, early_ns, prefetch_bytes)
                self._apply(schedule, 0.0, summary)
            else:
                if schedule is None:
                    schedule = self.schedule(program)
                lines = issuers = None       # only a kernel's timelines are shared (with the next kernel)
                self._apply(schedule, start_ns, summary)
            if lane is None:             # a collective on its lane leaves compute's DMA state alone
                self._last_dma = _DmaState(program.info.kind, start_ns, program.info.sbuf_peak_bytes,
                                           lines, issuers)
        if lane is None:
            self._device_free_ns = max(self._device_free_ns, summary.end_ns)
        else:
            lane.free_ns = max(lane.free_ns, summary.end_ns)
        if program.sync:
            self._host_ns = max(self._host_ns, summary.end_ns)
        self.trace.add_op(summary)
        return summary

    def schedule(self, program: Program) -> Schedule:
        """The program's timing relative to its start. A program starts with every engine, port
        and DMA queue free, so this depends on nothing fed before it and can be reused."""
        self._check_capacity(program)
        return self._schedule(program)[0]

    def _apply(self, schedule: Schedule, start_ns: float, summary: OpSummary) -> None:
        """Shift a schedule to ``start_ns``: its events into the trace, its totals into ``summary``."""
        trace, op_index = self.trace, summary.op_index
        if schedule.collective and "collective" not in trace.engines:
            trace.engines = (*trace.engines, "collective")   # the lane appears with its first collective
        trace.add_shifted(schedule.events, start_ns, op_index)
        for key, nbytes in schedule.traffic.items():
            setattr(summary, key, nbytes)
        summary.hardware_flops += schedule.hardware_flops
        summary.busy_ns = dict(schedule.busy_ns)
        summary.instruction_counts = dict(schedule.instruction_counts)
        summary.instruction_count = schedule.instruction_count
        summary.end_ns = start_ns + schedule.end_ns

    def wait(self, until_ns: float) -> OpSummary | None:
        """The compute stream waits until ``until_ns`` (for a collective): a ``wait`` row spans the
        time it idles, None when it need not wait."""
        if until_ns <= self._device_free_ns:
            return None
        row = self.trace.add_wait(self._device_free_ns, until_ns)
        self._device_free_ns = until_ns
        return row

    def _check_capacity(self, program: Program) -> None:
        """A plan larger than SBUF or PSUM is a lowering bug: say so rather than time it silently."""
        t, info = self.target, program.info
        if info.sbuf_peak_bytes > t.sbuf_usable_bytes or info.psum_peak_bytes > t.psum_bytes:
            log.warning("%s plans %d B of SBUF (usable %d) and %d B of PSUM (%d) on %s", info.name,
                        info.sbuf_peak_bytes, t.sbuf_usable_bytes, info.psum_peak_bytes, t.psum_bytes, t.name)

    def _prefetch_window(self, program: Program) -> tuple[float, int]:
        """(earliest start, bytes) of the loads a compiled kernel may issue while the compiled
        kernel before it runs; (0, 0) when it may not."""
        last, info = self._last_dma, program.info
        if last is None or info.kind != "kernel" or last.kind != "kernel" or info.prefetch_bytes <= 0:
            return 0.0, 0
        room = self.target.sbuf_usable_bytes - last.sbuf_peak_bytes
        return max(self._host_ns, last.start_ns), max(0, min(info.prefetch_bytes, room))

    def _schedule(self, program: Program, origin_ns: float = 0.0, early_ns: float = 0.0,
                  prefetch_bytes: int = 0) -> tuple[Schedule, list, list]:
        """(schedule, DMA engine timelines, issuing queues) of a program starting at ``origin_ns``."""
        t = self.target
        free = dict.fromkeys((*COMPUTE_ENGINES, "host", "collective"), origin_ns)
        if prefetch_bytes:      # share the previous kernel's DMA engines and issuing queues
            dma_lines, issuers = self._last_dma.lines, self._last_dma.issuers
            for line in (*dma_lines, *issuers):
                line.forget_before(early_ns)
        else:
            dma_lines = [_Timeline() for _ in range(t.dma_engines)]
            issuers = [_Timeline() for _ in range(int(assumptions.value("dma.issue_queues")))]
        issue_ns = assumptions.value("dma.issue_ns") if t.hardware_dge else 0.0
        queues: dict[int, float] = {}       # named DMA queue -> earliest start of its next transfer
        ports: dict[str, float] = {}
        busy = dict.fromkeys(("tensor", "vector", "scalar", "gpsimd", "dma", "host", "collective"), 0.0)
        counts: dict[str, int] = {}
        traffic = dict.fromkeys(TRAFFIC_FIELDS, 0)
        hardware_flops = 0
        events: list[tuple] = []
        ends: list[float] = []
        dep_ns = {e: t.dependency_overhead_cycles * 1e9 / t.clock_hz(e) for e in COMPUTE_ENGINES}
        for ins in program.instructions:
            ready = max((ends[d] for d in ins.deps), default=origin_ns)
            unit_ns = instruction_ns(ins, t)
            engine = ins.engine
            if engine == "dma":
                if prefetch_bytes:
                    if not ins.deps and ins.src == "hbm" and ins.dst == "sbuf" and ins.nbytes * ins.repeat <= prefetch_bytes:
                        ready = early_ns
                        prefetch_bytes -= ins.nbytes * ins.repeat
                    elif not ins.deps:
                        prefetch_bytes = 0      # loads issue in order: one that cannot go early stops the rest
                end = self._schedule_dma(ins, ready, unit_ns, dma_lines, issuers, issue_ns, events, queues)
                busy["dma"] += unit_ns * ins.repeat * min(ins.dma_engines, t.dma_engines)
            else:
                used = self._ports(ins)
                begin = max(ready, free[engine], *(ports.get(p, origin_ns) for p in used))
                duration = unit_ns * ins.repeat + (dep_ns[engine] if ins.deps and engine != "host" else 0.0)
                end = begin + duration
                free[engine] = end
                for p in used:
                    ports[p] = end
                busy[engine] += duration
                events.append((begin, end, engine, ins.opcode, ins.nbytes * ins.repeat, ins.flops))
            ends.append(end)
            counts[engine_class(engine)] = counts.get(engine_class(engine), 0) + ins.repeat
            if ins.traffic:
                for key, nbytes in ins.traffic.items():
                    traffic[key] += nbytes
            if engine == "tensor":
                hardware_flops += ins.flops
        schedule = Schedule(end_ns=max(ends), events=tuple(events), busy_ns={k: v for k, v in busy.items() if v},
                            instruction_counts=counts, instruction_count=sum(counts.values()), traffic=traffic,
                            hardware_flops=hardware_flops, collective="collective" in counts)
        return schedule, dma_lines, issuers

    def _ports(self, ins) -> tuple:
        """Shared ports this instruction holds on targets with NC-v2 port conflicts."""
        t, engine = self.target, ins.engine
        used = []
        if t.vector_gpsimd_share_sbuf and engine in ("vector", "gpsimd"):
            used.append("sbuf_vector_gpsimd")
        if t.vector_scalar_share_psum and engine in ("vector", "scalar") and "psum" in (ins.src, ins.dst):
            used.append("psum_vector_scalar")
        return tuple(used)

    def _schedule_dma(self, ins, ready: float, unit_ns: float, lines: list, issuers: list, issue_ns: float,
                      events: list, queues: dict) -> float:
        """A transfer in its DMA queue's order (``_place_dma``), when the program names the queue."""
        queue = ins.dma_queue
        if queue is None:
            return self._place_dma(ins, ready, unit_ns, lines, issuers, issue_ns, events, 0.0)
        earliest = queues.get(queue, 0.0)
        end = self._place_dma(ins, ready, unit_ns, lines, issuers, issue_ns, events, earliest)
        start = max(ready + self.target.dma_fixed_latency_ns, earliest)
        queues[queue] = max(end, start + assumptions.value("dma.queue_transfer_ns") * ins.repeat)
        return end

    def _place_dma(self, ins, ready: float, unit_ns: float, lines: list, issuers: list, issue_ns: float,
                   events: list, earliest: float) -> float:
        """Issue a transfer in the first gap of the issuing queue free soonest, then place it on the engines that
        can start it soonest, after the start latency and not before ``earliest``. ``repeat``
        instructions are issued one after another, so the engines cannot finish before the last
        one is issued."""
        k = min(max(1, ins.dma_engines), len(lines))
        trigger = max(ready + self.target.dma_fixed_latency_ns, earliest)
        duration = unit_ns * ins.repeat
        if issue_ns:
            issuing = issue_ns * ins.repeat
            begin, at, queue = min((*line.earliest(ready, issuing), q) for q, line in enumerate(issuers))
            issuers[queue].reserve(begin, issuing, at)
            trigger = max(trigger, begin + issue_ns)
            duration = max(duration, unit_ns + issue_ns * (ins.repeat - 1))
        per_engine_bytes = ins.nbytes * ins.repeat // k
        names, add_event, opcode = self._dma_names, events.append, ins.opcode
        end = ready
        if ins.repeat > 1 and unit_ns < issue_ns:
            return self._paced_dma(trigger, duration, k, per_engine_bytes, lines, events, opcode, end)
        # A transfer, or a run of them in one queue, takes the gaps each engine has: the engine
        # serves its queues round robin, so it interleaves with transfers placed earlier. Hot
        # path (every DMA scans all 16 engines): an engine whose last transfer ends by the
        # trigger is idle from then on, so it needs no gap search.
        runs = []
        for q, line in enumerate(lines):
            ends = line.ends
            if not ends or ends[-1] <= trigger or duration <= 0:
                runs.append((trigger + duration, q, None))
            else:
                pieces = line.spread(trigger, duration)
                runs.append((pieces[-1][1], q, pieces))
        runs.sort(key=_finish_then_engine)
        for finish, q, pieces in runs[:k]:
            if finish > end:
                end = finish
            if pieces is None:
                lines[q].reserve(trigger, duration, len(lines[q].ends))
                add_event((trigger, finish, names[q], opcode, per_engine_bytes, 0))
                continue
            lines[q].reserve_pieces(pieces)
            busy = moved = 0    # whole bytes per piece, summing to the engine's share
            for begin, stop in pieces:
                busy += stop - begin
                share = round(per_engine_bytes * busy / duration) - moved
                moved += share
                add_event((begin, stop, names[q], opcode, share, 0))
        return end

    @staticmethod
    def _paced_dma(trigger: float, duration: float, k: int, per_engine_bytes: int, lines: list, events: list,
                   opcode: str, end: float) -> float:
        """A run paced by issuing (each transfer shorter than its issue): its transfers are spaced
        out over ``duration``, which one unbroken slot per engine models."""
        slots = []
        for q, line in enumerate(lines):
            ends = line.ends
            if not ends or ends[-1] <= trigger:
                slots.append((trigger, len(ends), q))
            else:
                slots.append((*line.earliest(trigger, duration), q))
        slots.sort()
        for begin, at, q in slots[:k]:
            lines[q].reserve(begin, duration, at)
            finish = begin + duration
            if finish > end:
                end = finish
            events.append((begin, finish, f"dma{q}", opcode, per_engine_bytes, 0))
        return end
