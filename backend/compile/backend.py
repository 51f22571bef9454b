"""The TorchDynamo backend ``neuron``: Dynamo -> AOTAutograd -> fusion -> simulated kernels.

AOTAutograd traces the joint forward/backward graph; because ``DeviceTensor`` is a traceable
wrapper subclass, it desugars device tensors into their host tensors, so the graphs this
backend compiles are aten graphs over CPU tensors, and the compiled callables run them as is.
Recording is suspended from the moment Dynamo starts tracing a frame until it has compiled it,
so a profile never counts the tracer's fake executions as device ops.

torch finds the backend by name through ``entry_point`` (loading ``plugin``, which prepares
Dynamo with ``prepare_dynamo``); ``register()`` does both at once, eagerly.
"""
from __future__ import annotations

import functools
import logging
import sys
import warnings
from contextlib import ExitStack

import torch
from torch._dynamo.backends.common import aot_autograd

from backend import recording

from .device_values import adopt_device_values
from .entry_point import BACKEND_NAME
from .fusion import fuse
from .graph_log import CompiledGraphInfo, CompiledPartInfo, add_part, new_graph
from .kernels import node_sources
from .runtime import CompiledPart, drop_data_free_twins, place_on_host
from .slice_writes import drop_whole_scatters, write_inputs_in_place
from .state import STATE

__all__ = ["neuron_backend", "register", "is_registered", "prepare_dynamo", "BACKEND_NAME",
           "SUPPORTED_MODES", "OPTIONS"]

log = logging.getLogger(__name__)

# Modes torch.compile documents; none changes what this backend emits (no autotuning or CUDA
# graphs on a simulated NeuronCore), so the non-default ones compile as "default" with a warning.
SUPPORTED_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# options={...}: name -> (type, default, help)
OPTIONS = {
    "fusion": (bool, True, "fuse ops into kernels (False: one kernel per op)"),
    "sbuf_partition_bytes": (int, None, "SBUF bytes per partition for fusion decisions "
                                        "(default: the selected target's)"),
}


# -- recording is off while Dynamo traces -------------------------------------------------------
def _on_compile_start(_args) -> None:
    stack = getattr(STATE.tracing, "stack", None)
    if stack is None:
        stack = STATE.tracing.stack = []
    scope = ExitStack()
    scope.enter_context(recording.suspended())
    stack.append(scope)


def _on_compile_end(_args) -> None:
    stack = getattr(STATE.tracing, "stack", None)
    if stack:
        stack.pop().close()


def _ensure_callbacks() -> None:
    """(Re)install the compile start/end callbacks: ``torch._dynamo.reset()`` clears them."""
    from torch._dynamo.callback import callback_handler

    if _on_compile_start not in callback_handler.start_callbacks:
        callback_handler.register_start_callback(_on_compile_start)
        callback_handler.register_end_callback(_on_compile_end)


# -- options ------------------------------------------------------------------------------------
def _check_options(mode: str | None, options: dict | None) -> dict:
    mode = mode or "default"
    if mode not in SUPPORTED_MODES:
        raise ValueError(f"torch.compile(backend='neuron'): unknown mode {mode!r}; "
                         f"supported: {', '.join(SUPPORTED_MODES)}")
    if mode != "default":
        warnings.warn(f"torch.compile(backend='neuron', mode={mode!r}): the simulated NeuronCore "
                      f"has no autotuning or CUDA graphs; compiling as mode='default'", stacklevel=3)
    resolved = {name: default for name, (_, default, _) in OPTIONS.items()}
    for name, value in (options or {}).items():
        if name not in OPTIONS:
            raise ValueError(f"torch.compile(backend='neuron'): unknown option {name!r}; supported: "
                             + ", ".join(f"{k} ({h})" for k, (_, _, h) in OPTIONS.items()))
        kind = OPTIONS[name][0]
        if not isinstance(value, kind):
            raise TypeError(f"option {name!r} must be {kind.__name__}, got {type(value).__name__}")
        resolved[name] = value
    resolved["mode"] = mode
    return resolved


def _sbuf_partition_bytes(options: dict) -> int:
    if options["sbuf_partition_bytes"] is not None:
        return options["sbuf_partition_bytes"]
    return int(recording.current_target().sbuf_partition_bytes)


def _frame_and_id(gm: torch.fx.GraphModule) -> tuple[str, str]:
    """The traced function's name (the module's class for a compiled nn.Module, whose frame
    is torch's own wrapper) and Dynamo's compile id ("frame/attempt")."""
    from torch._guards import CompileContext

    compile_id = CompileContext.current_compile_id()
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        code = InstructionTranslator.current_tx().f_code
    except Exception:   # called outside Dynamo (e.g. directly on an FX graph)
        code = None
    frame = code.co_name if code is not None else "graph"
    if code is None or "/torch/" in code.co_filename:
        stack = next((n.meta["nn_module_stack"] for n in gm.graph.nodes
                      if n.meta.get("nn_module_stack")), None)
        if stack:
            frame = getattr(next(iter(stack.values()))[1], "__name__", frame)
    return frame, str(compile_id) if compile_id is not None else "0/0"


# -- compilers ----------------------------------------------------------------------------------
def _compile_part(graph: CompiledGraphInfo, part: str, options: dict,
                  gm: torch.fx.GraphModule, example_inputs) -> CompiledPart:
    with recording.suspended():
        place_on_host(gm)
        drop_data_free_twins(gm)
        drop_whole_scatters(gm)
        write_inputs_in_place(gm)
        groups = fuse(gm.graph, sbuf_partition_bytes=_sbuf_partition_bytes(options),
                      enabled=options["fusion"])
        forward = graph.parts.get("forward")
        sources = node_sources(gm.graph, forward.graph_module.graph if forward else None)
        info = CompiledPartInfo(part=part, graph_module=gm, groups=groups, sources=sources)
        add_part(graph, info)
        log.info("neuron: compiled %s/%s: %d ops -> %d kernels", graph.name, part,
                 info.op_count, info.kernel_count)
        compiled = CompiledPart(info)
        graph.dynamic = graph.dynamic or compiled.symbolic
        return compiled


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, mode: str | None = None,
                   options: dict | None = None):
    """Dynamo backend entry point (``torch.compile(model, backend="neuron")``)."""
    _ensure_callbacks()
    resolved = _check_options(mode, options)
    frame, compile_id = _frame_and_id(gm)
    graph = new_graph(frame, compile_id, mode=resolved["mode"])
    if graph.recompile_reasons:
        log.info("neuron: recompiling %s: %s", frame, "; ".join(graph.recompile_reasons))
    compiler = functools.partial
    with recording.suspended():
        adopt_device_values(gm)
        return aot_autograd(
            fw_compiler=compiler(_compile_part, graph, "forward", resolved),
            bw_compiler=compiler(_compile_part, graph, "backward", resolved),
            inference_compiler=compiler(_compile_part, graph, "inference", resolved),
            keep_inference_input_mutations=True,
        )(gm, example_inputs)


# What a caller that knows the backend only by name (CUDA emulation's torch.compile routing)
# reads off the function Dynamo resolves that name to.
neuron_backend.supported_modes = SUPPORTED_MODES


def is_registered() -> bool:
    """Whether Dynamo has this backend under its name (registered eagerly, or loaded through
    the entry point by a compile); never imports Dynamo to find out."""
    registry = sys.modules.get("torch._dynamo.backends.registry")
    return registry is not None and registry._COMPILER_FNS.get(BACKEND_NAME) is neuron_backend


def prepare_dynamo() -> None:
    """Set Dynamo up for this backend before it traces a frame. Idempotent; calling it again
    after ``torch._dynamo.reset()`` restores the compile callbacks that reset cleared."""
    _ensure_callbacks()
    if STATE.trace_rules_added:
        return
    from torch._dynamo import trace_rules

    # Dynamo must never trace the device plumbing or the simulator: when a compiled frame
    # falls back to eager, device ops re-enter Python in these packages. (Named as strings:
    # compile does not import the device.)
    for package in ("backend.device", "backend.recording", "backend.lowering", "backend.sim",
                    "backend.compile"):
        trace_rules.add(package)
    STATE.trace_rules_added = True


def register() -> None:
    """Make ``torch.compile(backend="neuron")`` available now, without the entry point.
    Idempotent, and like ``prepare_dynamo`` worth calling again after ``torch._dynamo.reset()``."""
    prepare_dynamo()
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    existing = _COMPILER_FNS.get(BACKEND_NAME)
    if existing is None:
        register_backend(name=BACKEND_NAME)(neuron_backend)
    elif existing is not neuron_backend:
        raise RuntimeError(f"a different torch.compile backend named {BACKEND_NAME!r} is already "
                           f"registered ({existing!r}); the workbench cannot register its own")
