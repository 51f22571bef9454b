"""The NeuronCore scheduler: in-order engine streams, DMA queues, dependencies, timing.

Each compute engine runs its instructions in program order in its own clock domain (costs
arrive in ns, converted from that engine's cycles). An instruction starts when its engine is
free and every instruction it depends on has finished; a dependent instruction pays the
~100-cycle semaphore wait once per entry. DMA transfers start ~1.3 us after their trigger on
the engines (of 16) that can start them soonest; queued transfers hide that latency behind the
previous transfer. Each engine serves its 16 queues round robin, so a transfer is not held
behind an unrelated one issued earlier (a store waiting for compute does not block the next
prefetch): a DMA engine is modelled as a timeline where a transfer takes the first free gap. NC-v2 port conflicts (VectorE/GpSimdE on SBUF,
VectorE/ScalarE on PSUM) serialise the engines that share a port.

One pass over the instructions, O(n) with a 16-entry DMA scan: a GPT-2-sized op stream
simulates in seconds. Programs run back to back; host dispatch (launch overhead) runs ahead
asynchronously until a program marked ``sync`` makes the host wait for the device.
"""
from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import replace

from backend.sim.costs import instruction_ns
from backend.sim.ir import COMPUTE_ENGINES, Program
from backend.sim.overlap import CollectiveLane
from backend.sim.presets import DEFAULT_NEURON_TARGET, NeuronConfig, get_target
from backend.sim.trace import TRAFFIC_FIELDS, InstructionEvent, OpSummary, Trace, engine_class

__all__ = ["Simulator", "engine_tracks"]

log = logging.getLogger(__name__)


class _Timeline:
    """Busy intervals of one DMA engine, sorted and disjoint; a transfer takes the first gap."""

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
        self.starts.insert(at, begin)
        self.ends.insert(at, begin + duration)


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
    def feed(self, program: Program, *, lane: CollectiveLane | None = None) -> OpSummary:
        """Simulate one program after everything fed before; append its events and rollup.

        With ``lane``, the program is a collective: it runs on that lane once the compute fed
        before it has finished, and compute fed after it does not wait for it
        (``backend.sim.overlap``)."""
        self._host_ns += program.info.launch_overhead_ns
        start_ns = max(self._device_free_ns, self._host_ns)
        if lane is not None:
            start_ns = lane.start(start_ns)
        summary = replace(program.info, op_index=len(self.trace.ops), start_ns=start_ns, end_ns=start_ns,
                          busy_ns={}, instruction_counts={}, nodes=tuple(program.info.nodes))
        if program.instructions:
            self._check_capacity(program)
            summary.end_ns = self._schedule(program, start_ns, summary)
        if lane is None:
            self._device_free_ns = max(self._device_free_ns, summary.end_ns)
        else:
            lane.free_ns = max(lane.free_ns, summary.end_ns)
        if program.sync:
            self._host_ns = max(self._host_ns, summary.end_ns)
        self.trace.add_op(summary)
        return summary

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

    def _schedule(self, program: Program, start_ns: float, summary: OpSummary) -> float:
        t = self.target
        trace, op_index = self.trace, summary.op_index
        free = dict.fromkeys((*COMPUTE_ENGINES, "host", "collective"), start_ns)
        dma_lines = [_Timeline() for _ in range(t.dma_engines)]
        ports: dict[str, float] = {}
        busy = dict.fromkeys(("tensor", "vector", "scalar", "gpsimd", "dma", "host", "collective"), 0.0)
        counts: dict[str, int] = {}
        traffic = dict.fromkeys(TRAFFIC_FIELDS, 0)
        ends: list[float] = []
        dep_ns = {e: t.dependency_overhead_cycles * 1e9 / t.clock_hz(e) for e in COMPUTE_ENGINES}
        for ins in program.instructions:
            ready = max((ends[d] for d in ins.deps), default=start_ns)
            unit_ns = instruction_ns(ins, t)
            engine = ins.engine
            if engine == "dma":
                end = self._schedule_dma(ins, ready, unit_ns, dma_lines, op_index)
                busy["dma"] += unit_ns * ins.repeat * min(ins.dma_engines, t.dma_engines)
            else:
                used = self._ports(ins)
                begin = max(ready, free[engine], *(ports.get(p, start_ns) for p in used))
                duration = unit_ns * ins.repeat + (dep_ns[engine] if ins.deps and engine != "host" else 0.0)
                end = begin + duration
                free[engine] = end
                for p in used:
                    ports[p] = end
                busy[engine] += duration
                if engine == "collective" and engine not in trace.engines:
                    trace.engines = (*trace.engines, engine)   # the lane appears with its first collective
                trace.add_event(InstructionEvent(begin, end, engine, ins.opcode, op_index,
                                                 ins.nbytes * ins.repeat, ins.flops))
            ends.append(end)
            counts[engine_class(engine)] = counts.get(engine_class(engine), 0) + ins.repeat
            if ins.traffic:
                for key, nbytes in ins.traffic.items():
                    traffic[key] += nbytes
            if engine == "tensor":
                summary.hardware_flops += ins.flops
        for key, nbytes in traffic.items():
            setattr(summary, key, nbytes)
        summary.busy_ns = {k: v for k, v in busy.items() if v}
        summary.instruction_counts = counts
        summary.instruction_count = sum(counts.values())
        return max(ends)

    def _ports(self, ins) -> tuple:
        """Shared ports this instruction holds on targets with NC-v2 port conflicts."""
        t, engine = self.target, ins.engine
        used = []
        if t.vector_gpsimd_share_sbuf and engine in ("vector", "gpsimd"):
            used.append("sbuf_vector_gpsimd")
        if t.vector_scalar_share_psum and engine in ("vector", "scalar") and "psum" in (ins.src, ins.dst):
            used.append("psum_vector_scalar")
        return tuple(used)

    def _schedule_dma(self, ins, ready: float, unit_ns: float, lines: list, op_index: int) -> float:
        """Place a transfer on the engines that can start it soonest, after the start latency."""
        k = min(max(1, ins.dma_engines), len(lines))
        trigger = ready + self.target.dma_fixed_latency_ns
        duration = unit_ns * ins.repeat
        # Hot path (every DMA scans all 16 engines): an engine whose last transfer ends by the
        # trigger is idle from then on, so its slot is (trigger, append at the end) without a
        # gap search. Flat (begin, at, q) tuples sort exactly like ((begin, at), q).
        slots = []
        for q, line in enumerate(lines):
            ends = line.ends
            if not ends or ends[-1] <= trigger:
                slots.append((trigger, len(ends), q))
            else:
                slots.append((*line.earliest(trigger, duration), q))
        slots.sort()
        per_engine_bytes = ins.nbytes * ins.repeat // k
        names, add_event, opcode = self._dma_names, self.trace.add_event, ins.opcode
        end = ready
        for begin, at, q in slots[:k]:
            lines[q].reserve(begin, duration, at)
            finish = begin + duration
            if finish > end:
                end = finish
            add_event(InstructionEvent(begin, finish, names[q], opcode, op_index, per_engine_bytes, 0))
        return end
