"""The bookkeeping every one-stream timeline shares (the GPU and the TPU cost models).

Work runs back to back on one stream: each costed op or kernel becomes an :class:`OpSummary`
starting where the previous one ended, with one :class:`InstructionEvent` per busy track.
Host<->device transfers pay an issue overhead, then copy over the host link on the ``copy``
track. Subclasses set ``engines``, build ``self._trace`` and say what a copy costs.
Collectives run on their own lane (``self._lane``, a :class:`CollectiveLane` the subclass makes
in ``reset``) beside the compute stream, which waits for them only where a record says so.

A session made with ``keep_workload`` remembers what it was fed, so the run can be replayed on
another config (``replay_ns``: what-ifs and ``backend.sim.sensitivity`` error bands).
"""
from __future__ import annotations

from backend.sim.collectives import collective_cost
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.overlap import WAIT_OP, WAITS_FOR, CollectiveLane
from backend.sim.trace import InstructionEvent, OpSummary, Trace

__all__ = ["StreamTimeline", "describe_shapes"]


def describe_shapes(tensors: tuple[TensorDesc, ...]) -> str:
    """``"4x8 float32, scalar bool"``."""
    return ", ".join(f"{'x'.join(map(str, t.shape)) or 'scalar'} {t.dtype}" for t in tensors)


class StreamTimeline:
    """One stream's clock and trace; subclasses cost the work."""

    engines: tuple[str, ...] = ()
    _trace: Trace
    _now_ns: float
    _lane: CollectiveLane
    workload: list | None = None     # (method name, args, kwargs) per call, with keep_workload

    def _keep(self, method: str, *args, **kwargs) -> None:
        if self.workload is not None:
            self.workload.append((method, args, kwargs))

    def _fresh(self, config) -> "StreamTimeline":
        """An empty session of this kind on ``config`` (otherwise set up as this one)."""
        raise NotImplementedError

    def replay_ns(self, config) -> float:
        """Simulated ns of everything this session was fed, run again on ``config``."""
        if self.workload is None:
            raise RuntimeError(f"{type(self).__name__} kept no workload to replay (make it with keep_workload=True)")
        fresh = self._fresh(config)
        for method, args, kwargs in self.workload:
            getattr(fresh, method)(*args, **kwargs)
        return fresh.trace.total_time_ns

    def copy_ns(self, nbytes: int) -> float:
        """Time to move ``nbytes`` over the host link."""
        raise NotImplementedError

    def _summary(self, name: str, kind: str, record: OpRecord | None, end_ns: float) -> OpSummary:
        return OpSummary(
            op_index=len(self._trace.ops), name=name, kind=kind, start_ns=self._now_ns,
            end_ns=end_ns, busy_ns=dict.fromkeys(self.engines, 0.0),
            input_shapes=describe_shapes(record.inputs) if record else "",
            output_shapes=describe_shapes(record.outputs) if record else "",
            source=record.source if record else None)

    def _append(self, summary: OpSummary) -> OpSummary:
        self._trace.add_op(summary)
        self._now_ns = summary.end_ns
        return summary

    def _event(self, start_ns: float, duration_ns: float, engine: str, opcode: str,
               op_index: int, nbytes: int = 0, flops: int = 0) -> float:
        if duration_ns > 0:
            self._trace.add_event(InstructionEvent(start_ns, start_ns + duration_ns, engine,
                                                   opcode, op_index, nbytes, flops))
        return start_ns + duration_ns

    @staticmethod
    def _label_kernel(summary: OpSummary, work: list[OpRecord], nodes, source: str | None) -> None:
        """Name a compiled kernel's row after its FX nodes and the shapes of the ops it runs."""
        summary.nodes = tuple(nodes)
        summary.source = source
        summary.input_shapes = "; ".join(describe_shapes(r.inputs) for r in work)
        summary.output_shapes = "; ".join(describe_shapes(r.outputs) for r in work)

    def _await_collectives(self, record: OpRecord) -> bool:
        """Make the compute stream wait for the collectives ``record`` waits for; True when the
        record is only that wait (``Work.wait()``), with nothing more to cost."""
        waits = record.attrs.get(WAITS_FOR)
        if waits:
            until_ns = self._lane.until(waits)
            if until_ns > self._now_ns:
                self._trace.add_wait(self._now_ns, until_ns)
                self._now_ns = until_ns
        return record.name == WAIT_OP

    def _feed_collective(self, record: OpRecord, ready_ns: float) -> None:
        """A collective on the lane: it starts once its data is ready (``ready_ns``) and the lane
        is free, priced on its topology; the compute stream goes on."""
        attrs = record.attrs
        cost = collective_cost(attrs["collective"], attrs["nbytes"], attrs["ranks"], attrs.get("topology"),
                               attrs.get("algorithm", "auto"))
        start = self._lane.start(ready_ns)
        summary = self._summary(record.name, "op", record, start + cost.time_ns)
        summary.start_ns = start
        summary.busy_ns = {"collective": cost.time_ns}
        summary.instruction_count = 1
        if "collective" not in self._trace.engines:
            self._trace.engines = (*self._trace.engines, "collective")   # the lane appears with its first collective
        self._event(start, cost.time_ns, "collective", cost.collective, summary.op_index, cost.nbytes)
        self._trace.add_op(summary)
        self._lane.finish(record.index, summary.end_ns)

    def _feed_transfer(self, record: OpRecord, copy_start_ns: float) -> None:
        """A host<->device copy starting at ``copy_start_ns`` (after its host-side overhead); its
        row spans from the stream's previous end."""
        if record.transfer not in ("h2d", "d2h"):
            raise ValueError(f"unknown transfer {record.transfer!r} in {record.name}; expected 'h2d' or 'd2h'")
        # the device-side tensor sets the size: the output of h2d, the input of d2h
        device_side, host_side = ((record.outputs, record.inputs) if record.transfer == "h2d"
                                  else (record.inputs, record.outputs))
        nbytes = sum(t.nbytes for t in (device_side or host_side))
        copy_ns = self.copy_ns(nbytes)
        summary = self._summary(record.name, "transfer", record, copy_start_ns + copy_ns)
        summary.busy_ns["copy"] = copy_ns
        if record.transfer == "h2d":
            summary.hbm_write_bytes = nbytes
        else:
            summary.hbm_read_bytes = nbytes
        summary.instruction_count = 1
        self._event(copy_start_ns, copy_ns, "copy", f"memcpy_{record.transfer}", summary.op_index, nbytes)
        self._append(summary)
