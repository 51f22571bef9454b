"""Logical NeuronCores: the core the Neuron runtime shows at a logical-core config (LNC) of 2.

At LNC=2 the runtime groups two physical NeuronCores into one logical core (trn2: 8 physical
cores, 4 logical at the default LNC=2; shared/hardware.md after NDOCS about-neuron/arch/
neuron-hardware/trainium2). One logical core then owns two cores' engines, DMA engines and
share of the chip's HBM capacity and bandwidth, and a chip shows ``cores_per_chip / lnc``
devices.

The stock presets (``trn1``, ``trn2``, ``trn3``) stay one physical core (LNC=1), which is what
every fidelity row was measured against. :func:`logical_core` derives the LNC=2 core as a named
preset, ``"trn2/lnc2"``, so profiles say what they simulate. The simulator models one in-order
stream per engine, so the second core's engines are modelled as that engine running
``ENGINE_SPEEDUP`` times faster (its clock scaled): an ideal even split of every instruction
stream over the two cores, which also shortens fixed per-instruction overheads in ns (optimistic
for short ops). SBUF and PSUM stay one core's: each physical core keeps its own, and the work is
tiled per core.
"""
from __future__ import annotations

import dataclasses
import re

from backend.sim.assumptions import Assumption
from backend.sim.spec import ASSUMPTION

__all__ = ["LNC_CHOICES", "ENGINE_SPEEDUP", "supported_lnc", "default_lnc", "logical_core", "lnc_of",
           "physical_name", "logical_name"]

_TRN2_PAGE = "about-neuron/arch/neuron-hardware/trainium2"

# Generation -> (LNC values the runtime accepts, where that comes from). trn1's two cores are
# always separate devices; trn3's LNC support is not in shared/hardware.md, so it is assumed
# to follow trn2 (8 physical cores per chip, like trn2).
LNC_CHOICES: dict[str, tuple[tuple[int, ...], str]] = {
    "NC-v2": ((1,), "about-neuron/arch/neuron-hardware/trainium (2 NeuronCores, no logical grouping)"),
    "NC-v3": ((1, 2), _TRN2_PAGE + " (8 physical; 4 logical at default LNC=2)"),
    "NC-v4": ((1, 2), ASSUMPTION + ": trn3 groups cores as trn2 does (8 cores per chip, "
                      "about-neuron/arch/neuron-hardware/trainium3)"),
}

ENGINE_SPEEDUP = Assumption(
    "lnc.engine_speedup", 2.0, "x one core's engine rate", ASSUMPTION,
    why="a logical core of two physical cores runs each engine's instructions over both cores; "
        "2 is an ideal even split by the compiler, uneven splits and cross-core synchronisation "
        "lose some of it", plausible=(1.5, 2.0))

_LOGICAL_SUFFIX = re.compile(r"/lnc(\d+)\*?$")
_CLOCKS = ("tensor_clock_hz", "vector_clock_hz", "scalar_clock_hz", "gpsimd_clock_hz")


def supported_lnc(config) -> tuple[int, ...]:
    """The logical-core configs the runtime accepts for ``config``'s generation."""
    return LNC_CHOICES.get(config.generation, ((1,), ""))[0]


def default_lnc(config) -> int:
    """The workbench's default: 1, so the stock preset (one physical core) is what runs.

    The Neuron runtime's own default on trn2 is 2; set ``NEURON_LOGICAL_NC_CONFIG=2`` (or
    ``torch.neuron.set_logical_nc_config(2)``) to simulate that.
    """
    return 1


def lnc_of(config) -> int:
    """The LNC a config (or preset name) was derived for (1 for a physical-core preset)."""
    name = config if isinstance(config, str) else config.name
    found = _LOGICAL_SUFFIX.search(name.rstrip("*"))
    return int(found.group(1)) if found else 1


def physical_name(name: str) -> str:
    """``"trn2/lnc2"`` -> ``"trn2"``."""
    return _LOGICAL_SUFFIX.sub("", name)


def logical_name(name: str, lnc: int) -> str:
    return name if lnc == 1 else f"{name}/lnc{lnc}"


def logical_core(config, lnc: int, engine_speedup: float | None = None):
    """The core the runtime shows at ``lnc`` for physical-core preset ``config``.

    LNC=1 returns ``config`` itself (numbers unchanged). LNC=2 returns ``"<name>/lnc2"``: half the
    cores per chip, so twice the HBM capacity and bandwidth share (the chip figures divided by
    the logical cores), twice the DMA engines, engine clocks times ``engine_speedup``
    (default :data:`ENGINE_SPEEDUP`).
    """
    lnc = int(lnc)
    choices = supported_lnc(config)
    if lnc not in choices:
        raise ValueError(f"logical NeuronCore config {lnc} is not supported on {config.name} "
                         f"({config.generation}); supported: {', '.join(map(str, choices))}")
    if lnc_of(config) != 1:
        raise ValueError(f"{config.name} is already a logical core; derive from the physical-core preset")
    if lnc == 1:
        return config
    speedup = ENGINE_SPEEDUP.value if engine_speedup is None else float(engine_speedup)
    low, high = ENGINE_SPEEDUP.plausible
    if not low <= speedup <= high:
        raise ValueError(f"engine_speedup {speedup} outside its plausible range {ENGINE_SPEEDUP.plausible}")
    why = LNC_CHOICES[config.generation][1]
    derived = config.derive(
        name=logical_name(config.name, lnc),
        cores_per_chip=config.cores_per_chip // lnc,
        hbm_bytes=config.hbm_bytes * lnc,
        hbm_bytes_per_s=config.hbm_bytes_per_s * lnc,
        dma_engines=config.dma_engines * lnc,
        **{clock: getattr(config, clock) * speedup for clock in _CLOCKS})
    sources = dict(derived.sources)
    sources.update({
        "cores_per_chip": f"{why}: logical cores per chip at LNC={lnc}",
        "hbm_bytes": f"{config.source('hbm_bytes')}; x{lnc} physical cores per logical core",
        "hbm_bytes_per_s": f"{config.source('hbm_bytes_per_s')}; x{lnc} physical cores per logical core",
        "dma_engines": f"{config.source('dma_engines')}; x{lnc} physical cores per logical core",
        **{clock: f"{ASSUMPTION} {ENGINE_SPEEDUP.name} = {speedup:g} (range {low:g}..{high:g}): "
                  f"{config.source(clock)}, x{speedup:g} for {lnc} cores' engines" for clock in _CLOCKS},
    })
    return dataclasses.replace(derived, sources=sources)
