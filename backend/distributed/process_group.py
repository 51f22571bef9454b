"""``NeuronProcessGroup``: the process group behind ``init_process_group("neuron")``.

A Python ``ProcessGroup`` (PyTorch forwards its C++ virtual calls here, so DDP's reducer uses it
too). Each collective unwraps device tensors to the host tensors that hold their values, lets an
exchange backend move the values -- gloo between real ranks, PyTorch's ``FakeProcessGroup`` for
one rank of a large world (no values move) -- and reports the collective to the op stream, where
the topology model prices it. Work handles are the exchange's own, re-pointed at the device
tensors, so ``wait()`` and ``get_future()`` behave as PyTorch's do.
"""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from backend.device import fake_values
from backend.device.timing_only import has_data_free

from .dependencies import report_wait
from .reporting import host_tensors, report_collective

__all__ = ["NeuronProcessGroup", "DeviceWork"]


class DeviceWork(dist.Work):
    """The exchange's Work, whose future yields the device tensors rather than their host ones
    (DDP's reducer reads the reduced bucket from it). ``work`` is None when nothing was issued.
    ``collective``: the index of the collective's record, which ``wait()`` makes the simulated
    compute stream wait for (None when it was not recorded)."""

    def __init__(self, work, outputs: list, collective: int | None = None):
        super().__init__()
        self._work = work
        self._outputs = outputs
        self._collective = collective

    def wait(self, timeout=None) -> bool:
        report_wait((self._collective,))
        self._collective = None         # a second wait() waits for nothing more
        if self._work is not None:
            self._work.wait() if timeout is None else self._work.wait(timeout)
        return True

    def is_completed(self) -> bool:
        return self._work is None or self._work.is_completed()

    def get_future(self) -> torch.futures.Future:
        # Not ``self._work.get_future().then(python_fn)``: that callback is released on a gloo
        # worker thread, which needs the GIL, and a group destroyed meanwhile (DDP teardown) joins
        # that thread while holding the GIL -- a deadlock seen in about one run in three. The
        # exchange finishes here instead; simulated overlap comes from the op stream, not from it.
        if self._work is not None:
            self._work.wait()
        done = torch.futures.Future()
        done.set_result(self._outputs)
        return done


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _flatten(lists):
    """The tensors of a list of lists, and how to put a same-length list back into that shape."""
    sizes = [len(ts) for ts in lists]

    def regroup(flat):
        it = iter(flat)
        return [[next(it) for _ in range(n)] for n in sizes]
    return [t for ts in lists for t in ts], regroup


def _pairwise(collective, outputs, inputs, opts):
    """A coalesced collective as one ``collective(output, input, opts)`` per pair (the exchange
    backends bind no coalesced form to Python): the last pair's Work, the earlier ones finished."""
    work = None
    for output, input in zip(outputs, inputs, strict=True):
        if work is not None:
            work.wait()
        work = collective(output, input, opts)
    return work


class NeuronProcessGroup(dist.ProcessGroup):
    """Collectives of one rank: values through ``exchange``, costs through the op stream."""

    def __init__(self, exchange, rank: int, size: int, topology, fake: bool = False):
        super().__init__(rank, size)
        self._exchange = exchange
        self.topology = topology
        self.moves_no_values = fake         # built on PyTorch's fake process group
        # One rank of a fake world: outputs keep this rank's own data, so they are marked as
        # values the world did not compute (``backend.device.fake_values``).
        self.fake = fake and size > 1

    def getBackendName(self) -> str:   # noqa: N802  (PyTorch's C++ name, overridden through pybind)
        return "neuron"

    # -- plumbing -------------------------------------------------------------------------------
    def _run(self, collective: str, nbytes: int, inputs, outputs, issue, root: int | None = None):
        """Report, then issue ``issue(host inputs, host outputs)``; a Work that yields ``outputs``.
        ``root``: the rank whose values a broadcast hands out."""
        host_in, in_device = host_tensors(inputs)
        host_out, out_device = host_tensors(outputs)
        index = None
        if in_device or out_device:
            index = report_collective(collective, nbytes, self.size(), self.topology, inputs=host_in, outputs=host_out)
        if has_data_free(host_in) or has_data_free(host_out):
            # Timing-only tensors: no values to move (every rank runs the same program, so all
            # skip alike). Outputs that held values hold stale bytes now: marked as holding none.
            work = None
            fake_values.drop([t for t in host_out if not t.is_meta], collective)
        else:
            work = issue(host_in, host_out)
            if self.fake and host_out and root != self.rank():
                self._mark_fake(collective, host_out, on_device=in_device or out_device)
        return DeviceWork(work, list(outputs), index)

    def _mark_fake(self, collective: str, host_out, on_device: bool) -> None:
        """Mark what this rank's collective left in ``host_out`` as values the world did not compute.

        Integer all-gathers stay readable: they hand every rank this rank's values, which is
        what the shape and size checks of DDP, FSDP and the object collectives compare in a world
        of identical ranks. Host tensors (no device dispatch to guard their reads) get a warning.
        """
        marked = [t for t in host_out if collective != "all_gather" or t.is_floating_point() or t.is_complex()]
        if not marked:
            return
        if on_device:
            fake_values.mark(marked, collective, self.size())
        else:
            warnings.warn(
                f"{collective} of host tensors in a {self.size()}-rank fake world moves no values: the "
                f"outputs hold this rank's own data, not the world's result (device tensors raise "
                f"FakeWorldValueError when read)", UserWarning, stacklevel=4)

    # -- the collectives ------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        return self._run("all_reduce", _nbytes(tensors), tensors, tensors,
                         lambda i, o: self._exchange.allreduce(o, opts))

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        return self._run("all_reduce", _nbytes(tensors), tensors, tensors,
                         lambda i, o: self._exchange.allreduce_coalesced(o, opts))

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        return self._run("broadcast", _nbytes(tensors), tensors, tensors,
                         lambda i, o: self._exchange.broadcast(o, opts), root=opts.rootRank)

    def allgather(self, output_lists, inputs, opts=None):
        opts = opts or dist.AllgatherOptions()
        flat, regroup = _flatten(output_lists)
        return self._run("all_gather", _nbytes(output_lists[0]) if output_lists else 0, inputs, flat,
                         lambda i, o: self._exchange.allgather(regroup(o), i, opts))

    def all_gather_single(self, output, input, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._run("all_gather", _nbytes([output]), [input], [output],
                         lambda i, o: self._exchange._allgather_base(o[0], i[0], opts))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        """What functional collectives (DTensor's ``full_tensor()``, FSDP2) call for an all-gather."""
        opts = opts or dist.AllgatherOptions()
        return self._run("all_gather", _nbytes(outputs), inputs, outputs,
                         lambda i, o: _pairwise(self._exchange._allgather_base, o, i, opts))

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        flat, regroup = _flatten(input_lists)
        return self._run("reduce_scatter", _nbytes(input_lists[0]) if input_lists else 0, flat, outputs,
                         lambda i, o: self._exchange.reduce_scatter(o, regroup(i), opts))

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._run("reduce_scatter", _nbytes([input]), [input], [output],
                         lambda i, o: self._exchange._reduce_scatter_base(o[0], i[0], opts))

    def scatter(self, outputs, input_lists, opts=None):
        """Root's ``input_lists[0]`` (one tensor per rank) to each rank's ``outputs[0]``: how
        ``distribute_tensor`` shards a tensor (DTensor, tensor parallel)."""
        opts = opts or dist.ScatterOptions()
        flat, regroup = _flatten(input_lists)
        return self._run("scatter", _nbytes(outputs) * self.size(), flat, outputs,
                         lambda i, o: self._exchange.scatter(o, regroup(i), opts))

    def gather(self, output_lists, inputs, opts=None):
        opts = opts or dist.GatherOptions()
        flat, regroup = _flatten(output_lists)
        return self._run("gather", _nbytes(inputs) * self.size(), inputs, flat,
                         lambda i, o: self._exchange.gather(regroup(o), i, opts))

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._run("reduce_scatter", _nbytes(inputs), inputs, outputs,
                         lambda i, o: _pairwise(self._exchange._reduce_scatter_base, o, i, opts))

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        return self._run("all_to_all", _nbytes([input]), [input], [output],
                         lambda i, o: self._exchange.alltoall_base(o[0], i[0], output_split_sizes,
                                                                   input_split_sizes, opts))

    alltoall_base = all_to_all_single

    def send(self, tensors, dst, tag=0):
        return self._run("send_recv", _nbytes(tensors), tensors, (),
                         lambda i, o: self._exchange.send(i, dst, tag))

    def recv(self, tensors, src, tag=0):
        return self._run("send_recv", _nbytes(tensors), (), tensors,
                         lambda i, o: self._exchange.recv(o, src, tag))

    def barrier(self, opts=None):
        opts = opts or dist.BarrierOptions()
        # A barrier moves no data; it still occupies the lane, so it is reported like a collective
        # whenever someone is recording.
        index = report_collective("barrier", 0, self.size(), self.topology)
        return DeviceWork(self._exchange.barrier(opts), [], index)

