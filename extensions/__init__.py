"""The workbench's IPython extension: ``%load_ext workbench`` (or ``%load_ext extensions``).

Magics, each a thin layer over ``workbench``:

- ``%neuron_device``   show or switch the device model code runs on (cpu, neuron, cuda)
- ``%%neuron_profile`` run a cell on a simulated device and show the dashboard (also
  ``--compare cpu,cuda,neuron``, ``--compile``, ``-o``)
- ``%neuron_graphs``   the graphs ``torch.compile(backend="neuron")`` compiled in this session
- ``%neuron_migrate``  what moving a model from a GPU to Trainium would take (``wb.migration_report``)
- ``%neuron_serve``    a request load on a model, per target: TTFT, TPOT, goodput, USD per 1M tokens (``wb.serve``)

A new magic is a ``Magics`` class added to ``MAGICS``; loading registers every class there and
unloading removes exactly the names they registered.
"""
from __future__ import annotations

import logging

from extensions.device_magics import DeviceMagics
from extensions.graph_magics import GraphMagics
from extensions.migrate_magics import MigrateMagics
from extensions.profile_magics import ProfileMagics
from extensions.serve_magics import ServeMagics

__all__ = ["MAGICS", "load_ipython_extension", "unload_ipython_extension"]

log = logging.getLogger(__name__)

MAGICS = (DeviceMagics, ProfileMagics, GraphMagics, MigrateMagics, ServeMagics)


def load_ipython_extension(ipython) -> None:
    for magics in MAGICS:
        ipython.register_magics(magics)
    log.debug("registered %s", ", ".join(m.__name__ for m in MAGICS))


def unload_ipython_extension(ipython) -> None:
    manager = ipython.magics_manager
    for magics in MAGICS:
        for kind, names in magics.magics.items():
            for name in names:
                manager.magics[kind].pop(name, None)
        manager.registry.pop(magics.__name__, None)
