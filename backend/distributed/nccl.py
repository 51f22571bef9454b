"""``init_process_group("nccl")`` under CUDA emulation: CUDA-written jobs run unchanged.

While emulation is on, ``"nccl"`` is registered through ``Backend.register_backend`` for the
``cuda`` device; its creator builds the workbench's process group (gloo moves the values, or
``NeuronOptions(fake=True)`` simulates one rank of a large world) and prices collectives on the
emulated GPU's node topology (``h100`` -> ``dgx-h100``: NVLink inside 8 GPUs, InfiniBand
between nodes), so they show on the GPU profile's collective lane.

c10d tests ``backend == Backend.NCCL`` before it consults registered plugins, so a plugin named
"nccl" is unreachable while ``Backend.NCCL`` names the built-in one. For the emulation's
lifetime ``Backend.NCCL`` is therefore ``Backend.UNDEFINED`` (``Backend("nccl")`` then parses
to the plain name and c10d finds the plugin). Everything is applied through the emulation's
patcher, so ``disable()`` restores PyTorch's own "nccl" (and its "doesn't have NCCL built in").
"""
from __future__ import annotations

import torch.distributed as dist

from backend.device import cuda_emulation
from backend.sim.topology import get_topology

from .backend import build_process_group
from .process_group import NeuronProcessGroup

__all__ = ["NCCL_NAME", "create_nccl_process_group", "node_topology", "install", "register"]

NCCL_NAME = "nccl"
_OFF = ('"nccl" runs on emulated CUDA in this CPU-only PyTorch build: turn CUDA emulation on first '
        '(wb.set_device("cuda") or %neuron_device cuda), then call init_process_group("nccl")')


def node_topology(device) -> str | None:
    """The interconnect of the emulated GPU's node (``dgx-h100`` for an h100, derived presets
    by their base); None when "cuda" runs on the neuron device (redirect): its default applies."""
    if device.redirect:
        return None
    name = device.config.name
    base = next((key for key in cuda_emulation.GPU_MODELS if name.startswith(key)), name)
    return get_topology(base).name


def create_nccl_process_group(common_opts, backend_opts) -> NeuronProcessGroup:
    """PyTorch's extended-API creator for ``"nccl"``; refuses while emulation is off."""
    device = cuda_emulation.current()
    if device is None:
        raise RuntimeError(_OFF)
    return build_process_group(common_opts, backend_opts, "cuda", node_topology(device))


def _keep(patcher, mapping: dict, key, label: str) -> None:
    """Restore ``mapping[key]`` (or its absence) as it is now, whatever is written to it later."""
    if key in mapping:
        patcher.setitem(mapping, key, mapping[key], label)
    else:
        patcher.on_restore(f"{label}[{key!r}]", lambda: mapping.pop(key, None))


def install(patcher, device) -> None:
    """Route "nccl" to the workbench while emulation is on (an emulation extension)."""
    backend = dist.Backend
    _keep(patcher, backend.backend_type_map, NCCL_NAME, "Backend.backend_type_map")
    _keep(patcher, backend.backend_capability, NCCL_NAME, "Backend.backend_capability")
    _keep(patcher, backend._plugins, NCCL_NAME.upper(), "Backend._plugins")
    backend.register_backend(NCCL_NAME, create_nccl_process_group, extended_api=True, devices=["cuda"])
    patcher.setattr(backend, "NCCL", backend.UNDEFINED)


def register() -> None:
    """Have CUDA emulation bring "nccl" with it (once per process; a build with NCCL keeps its own)."""
    if not dist.is_nccl_available() and install not in cuda_emulation.EXTENSIONS:
        cuda_emulation.EXTENSIONS.append(install)
