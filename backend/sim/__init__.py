"""The NeuronCore (and GPU) simulator. Pure Python + numpy: never imports torch or IPython."""
from backend.sim.descriptors import DTYPE_BYTES, OpRecord, TensorDesc
from backend.sim.ir import Instruction, Program
from backend.sim.presets import DEFAULT_TARGET, TARGETS, NeuronConfig, derive, get_target
from backend.sim.scheduler import Simulator, engine_tracks
from backend.sim.trace import InstructionEvent, OpSummary, Trace

__all__ = ["TensorDesc", "OpRecord", "DTYPE_BYTES", "Instruction", "Program", "NeuronConfig", "TARGETS",
           "DEFAULT_TARGET", "get_target", "derive", "Simulator", "engine_tracks", "InstructionEvent",
           "OpSummary", "Trace"]
