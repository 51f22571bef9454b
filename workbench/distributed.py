"""Run a function on N ranks of the simulated device: ``launch(fn, nprocs)``.

A thin wrapper over ``torch.multiprocessing``: it picks a free rendezvous port, starts the
ranks, initialises the ``"neuron"`` process group in each (gloo underneath, so values equal a
CPU run), calls ``fn(rank, world_size, *args)`` and returns each rank's result, in rank order.
``fake_world`` is the other mode: this process becomes one rank of a large world whose
collectives are priced but move no values.
"""
from __future__ import annotations

import datetime
import os
import pickle
import socket
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from backend.distributed import BACKEND_NAME, TOPOLOGY_ENV, NeuronOptions
from backend.distributed.placement import rank_topology

__all__ = ["launch", "fake_world", "RANK_TRACE"]

RANK_TRACE = "rank{rank}.json"          # the file each rank writes under ``launch(trace_dir=...)``
LOOPBACK = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _loopback_interface() -> str | None:
    """The loopback interface's name ("lo" on Linux, "lo0" on macOS), for plain gloo ranks."""
    return next((name for _, name in socket.if_nameindex() if name.startswith("lo")), None)


def _loopback_store(rank: int, nprocs: int, port: int) -> dist.TCPStore:
    """The rendezvous store, listening on loopback only: a ``TCPStore`` given only a host name
    listens on every interface. Rank 0 binds the socket itself and hands it over."""
    timeout = datetime.timedelta(minutes=5)
    if rank != 0:
        return dist.TCPStore(LOOPBACK, port, nprocs, False, timeout=timeout)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((LOOPBACK, port))
    listener.listen()
    return dist.TCPStore(LOOPBACK, port, nprocs, True, timeout=timeout, master_listen_fd=listener.detach())


def _traced(fn, rank: int, trace_dir: str):
    """``fn`` run under a profile whose Chrome trace the rank writes as ``trace_dir/rank<N>.json``."""
    from workbench.session import profile

    def run(*args):
        with profile(source=False) as prof:
            result = fn(*args)
        prof.export_chrome_trace(Path(trace_dir) / RANK_TRACE.format(rank=rank))
        return result
    return run


def _run_rank(rank, fn, nprocs, args, backend, environment, results, trace_dir=None):
    os.environ.update(environment)      # in the rank's process only: the caller's stays as it was
    # What torchrun sets: the "neuron" group binds the rank to neuron:<LOCAL_RANK % device_count>.
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs))
    store = _loopback_store(rank, nprocs, int(environment["MASTER_PORT"]))
    dist.init_process_group(backend, store=store, rank=rank, world_size=nprocs)
    try:
        run = fn if trace_dir is None else _traced(fn, rank, trace_dir)
        # Pickled by value here: tensors would otherwise travel as shared-memory handles that die
        # with this process before the caller reads them.
        results.put((rank, pickle.dumps(run(rank, nprocs, *args))))
    finally:
        dist.destroy_process_group()


def launch(fn, nprocs: int, *args, backend: str = BACKEND_NAME, topology: str | None = None,
           start_method: str = "fork", trace_dir=None) -> list:
    """Run ``fn(rank, nprocs, *args)`` on ``nprocs`` ranks; returns their results by rank.

    ``backend="gloo"`` runs the same function on plain CPU ranks, for comparison. ``start_method``
    "fork" lets a function defined in a notebook run; "spawn" needs an importable one. Results
    must pickle. ``trace_dir``: each rank profiles ``fn`` and writes its Chrome/Perfetto trace
    there as ``rank<N>.json`` (with ``distributedInfo``, for Holistic Trace Analysis). Every
    socket of the job (the rendezvous store, gloo's pairs) listens on 127.0.0.1 only.
    """
    environment = {"MASTER_ADDR": LOOPBACK, "MASTER_PORT": str(_free_port())}
    if topology is not None:
        environment[TOPOLOGY_ENV] = topology
    interface = _loopback_interface()
    if backend == "gloo" and interface and "GLOO_SOCKET_IFNAME" not in os.environ:
        environment["GLOO_SOCKET_IFNAME"] = interface      # "neuron" binds its gloo to loopback itself
    results = mp.get_context(start_method).SimpleQueue()
    ranks = mp.start_processes(_run_rank, args=(fn, nprocs, args, backend, environment, results,
                                                   None if trace_dir is None else str(trace_dir)), nprocs=nprocs,
                               start_method=start_method, join=False)
    by_rank: dict = {}
    finished = False
    while not finished:
        # Read while the ranks run: a result larger than the pipe's buffer blocks its rank until
        # it is read. join() raises if a rank failed.
        finished = ranks.join(timeout=0.05)
        while not results.empty():
            rank, blob = results.get()
            by_rank[rank] = pickle.loads(blob)
    return [by_rank[r] for r in range(nprocs)]


def fake_world(world_size: int, rank: int = 0, topology: str | None = None, ranks_per_chip: int | None = None) -> None:
    """Make this process rank ``rank`` of a ``world_size`` world on PyTorch's fake process group:
    no values are exchanged, every collective is still priced on ``topology``.

    Ranks are placed as jobs place them: one per NeuronCore on a Trainium topology (32 per
    trn1.32xlarge; 128 per trn2.48xlarge, 64 at LNC=2 -- the selected target's cores when it is
    that chip), one per GPU. ``ranks_per_chip`` overrides that (1: one rank per chip).

    What a collective leaves in a device tensor is this rank's own data, not the world's result,
    so reading it or anything computed from it (``.item()``, ``.cpu()``, printing) raises
    ``FakeWorldValueError`` (a ``TimingOnlyError``). Readable: a broadcast from this rank and
    integer all-gathers (each rank's copy of this rank's values: the shape checks of DDP and
    FSDP, ``all_gather_object``). An object collective from another rank raises the same error.
    Host (CPU) tensors in a collective get a warning instead. Destroy the world with
    ``dist.destroy_process_group()``."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    ranks_see = rank_topology(topology or os.environ.get(TOPOLOGY_ENV), ranks_per_chip)
    dist.init_process_group(BACKEND_NAME, store=FakeStore(), rank=rank, world_size=world_size,
                            pg_options=NeuronOptions(fake=True, topology=ranks_see))
