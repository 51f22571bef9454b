"""The NeuronCore (and GPU) simulator. Pure Python + numpy: never imports torch or IPython.

Hardware presets are one mechanism for every kind of hardware (``backend.sim.spec``): typed,
frozen dataclasses (``NeuronConfig``, ``backend.sim.gpu.GpuConfig``) whose fields have units in
their names (``tensor_clock_hz``, ``hbm_bytes``, ``dma_fixed_latency_ns``) and carry a unit, a help
text and a source -- a citation from shared/hardware.md or an ``ASSUMPTION`` with a plausible
range. Ask a preset about itself with ``get_target("trn2").explain("sbuf_bytes")`` or
``print(get_target("h100").table())``. ``get_target(name)`` finds a preset of any kind,
``kinds()`` and ``list_presets(kind)`` list them, ``derive("trn2", sbuf_bytes=48 * MiB)`` makes a
what-if named ``"trn2*"`` that records its changes, and ``DEFAULT_NEURON_TARGET`` /
``DEFAULT_GPU_TARGET`` name the defaults once.
"""
from backend.sim.descriptors import DTYPE_BYTES, OpRecord, TensorDesc
from backend.sim.ir import Instruction, Program
from backend.sim.presets import (DEFAULT_GPU_TARGET, DEFAULT_NEURON_TARGET, DEFAULT_TARGETS, TARGETS,
                                 NeuronConfig, derive, get_target, kinds, list_presets)
from backend.sim.scheduler import Simulator, engine_tracks
from backend.sim.spec import ASSUMPTION, FieldInfo, HardwareConfig
from backend.sim.trace import InstructionEvent, OpSummary, Trace

__all__ = ["TensorDesc", "OpRecord", "DTYPE_BYTES", "Instruction", "Program",
           "HardwareConfig", "FieldInfo", "ASSUMPTION", "NeuronConfig", "TARGETS",
           "DEFAULT_NEURON_TARGET", "DEFAULT_GPU_TARGET", "DEFAULT_TARGETS", "kinds", "list_presets",
           "get_target", "derive", "Simulator", "engine_tracks", "InstructionEvent",
           "OpSummary", "Trace"]
