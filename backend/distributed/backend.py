"""Registration of the ``"neuron"`` backend with ``torch.distributed``.

``Backend.register_backend("neuron", ..., extended_api=True, devices=["neuron"])``: PyTorch calls
:func:`create_process_group` from ``init_process_group("neuron")`` and ``new_group``. Which
exchange moves the values is chosen by the options: ``NeuronOptions(fake=True)`` (with PyTorch's
``FakeStore``) simulates one rank of a large world on ``FakeProcessGroup``; otherwise gloo.
The topology pricing the collectives comes from the options, else ``$WORKBENCH_TOPOLOGY``,
else the default preset, so ranks started by ``torch.multiprocessing`` or torchrun agree.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import FakeProcessGroup

from backend.device import register as register_device
from backend.sim.topology import Topology, get_topology

from .process_group import NeuronProcessGroup

__all__ = ["BACKEND_NAME", "TOPOLOGY_ENV", "NeuronOptions", "create_process_group", "build_process_group", "register",
           "is_registered", "bind_local_core"]

BACKEND_NAME = "neuron"
TOPOLOGY_ENV = "WORKBENCH_TOPOLOGY"


@dataclass
class NeuronOptions:
    """``pg_options`` of ``init_process_group("neuron", ...)``.

    fake: simulate this rank of the world without exchanging values (PyTorch's fake process
        group); collectives are still priced.
    topology: the interconnect preset (``backend.sim.topology``) pricing the collectives, by name
        or as a :class:`~backend.sim.topology.Topology` (a derived one: a TPU slice, a what-if).
    """

    fake: bool = False
    topology: str | Topology | None = None


def create_process_group(common_opts, backend_opts) -> NeuronProcessGroup:
    """PyTorch's extended-API creator: ``common_opts`` carries store, group rank, size and timeout.
    Registers the device first: a script with only ``import torch`` may name "neuron" here first."""
    register_device()
    return build_process_group(common_opts, backend_opts, BACKEND_NAME)


def build_process_group(common_opts, backend_opts, device_type: str, default_topology=None) -> NeuronProcessGroup:
    """The group of one rank for tensors of ``device_type``; its topology is the options', else
    ``$WORKBENCH_TOPOLOGY``, else ``default_topology``, else the default preset."""
    options = backend_opts if isinstance(backend_opts, NeuronOptions) else _world_options()
    if device_type == BACKEND_NAME and not options.fake:
        bind_local_core()
    rank, size = common_opts.group_rank, common_opts.group_size
    chosen = options.topology or os.environ.get(TOPOLOGY_ENV) or default_topology
    topology = chosen if isinstance(chosen, Topology) else get_topology(chosen).name
    if options.fake:
        exchange = FakeProcessGroup._create_internal(rank, size)
    else:
        exchange = _gloo(common_opts.store, rank, size, common_opts.timeout)
    group = NeuronProcessGroup(exchange, rank, size, topology, fake=options.fake)
    # c10d keeps a group's name on its backends (``_set_group_name`` writes it to each, and
    # ``group_name`` reads the first): without one, DeviceMesh and FSDP2 find "name not set".
    # Collectives still go through NeuronProcessGroup's Python overrides, which report them.
    group._register_backend(torch.device(device_type), dist.ProcessGroup.BackendType.CUSTOM, exchange)
    return group


def _world_options() -> NeuronOptions:
    """What ``new_group`` (a DeviceMesh's dimensions, ...) gets without options: the world's, so
    a sub-group of a fake world is fake too (gloo over PyTorch's ``FakeStore`` cannot start)."""
    world = dist.distributed_c10d._get_default_group() if dist.is_initialized() else None
    if isinstance(world, NeuronProcessGroup):
        return NeuronOptions(fake=world.moves_no_values, topology=world.topology)
    return NeuronOptions()


_LOOPBACK = "127.0.0.1"


def _is_loopback(host: str | None) -> bool:
    return host is not None and (host == "localhost" or host.startswith("127.") or host == "::1")


def _gloo(store, rank: int, size: int, timeout) -> dist.ProcessGroupGloo:
    """Gloo between the ranks; on loopback when the rendezvous is (``MASTER_ADDR`` 127.0.0.1:
    ranks of one machine, as ``launch`` and single-node torchrun start them), where gloo's
    default device would listen on the host's network address."""
    if not _is_loopback(os.environ.get("MASTER_ADDR")):
        return dist.ProcessGroupGloo(store, rank, size, timeout)
    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=_LOOPBACK)]
    options._timeout = timeout
    return dist.ProcessGroupGloo(store, rank, size, options)


def bind_local_core() -> int | None:
    """Make ``neuron:<LOCAL_RANK % device_count>`` this process's current NeuronCore, as CUDA jobs
    do ``torch.cuda.set_device(local_rank)``: torchrun's ranks on one chip then use one core
    each, and ``device="neuron"`` means that core. Returns the index (None outside a job)."""
    from backend.device.neuron_module import MODULE as cores

    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is None:
        return None
    index = int(local_rank) % cores.device_count()
    cores.set_device(index)
    return index


def is_registered() -> bool:
    return BACKEND_NAME.upper() in dist.Backend._plugins


def register() -> None:
    """Register the backend once per process."""
    if not is_registered():
        dist.Backend.register_backend(BACKEND_NAME, create_process_group, extended_api=True, devices=["neuron"])
