"""``torch.distributed.pipelining.pipeline(model, ...)`` for models bound for ``neuron``.

``pipeline`` traces the model with ``torch.export``, whose fake-tensor mode keeps a weak
reference (``WeakIdRef``) to every real parameter it saw, for as long as the traced graph lives.
``pipe.build_stage(rank, device)`` then moves the stage's module to the device; for ``neuron``
(a wrapper tensor subclass) ``Module.to`` swaps the parameters in place
(``torch.utils.swap_tensors``), which refuses a tensor that has a weak reference, so the stage
failed with "Couldn't swap InterpreterModule.weight". Tracing here drops those references once
the export is done, as ``torch.compile`` does for its own traces
(``torch._dynamo.convert_frame._clear_fake_mode_weakrefs``); the fake mode only loses its cache
of real-to-fake conversions, which nothing reads after the export.
"""
from __future__ import annotations

import functools

from torch._guards import detect_fake_mode
from torch.distributed.pipelining._IR import Pipe

from .replacement import replace_once

__all__ = ["install", "release_parameter_references"]


def release_parameter_references(exported_program) -> None:
    """Forget the real tensors the export's fake mode remembers (its weak references to them)."""
    mode = detect_fake_mode([node.meta.get("val") for node in exported_program.graph.nodes])
    if mode is not None:
        describer = mode.fake_tensor_converter.meta_converter.describer
        describer.lookup_tensor.clear()
        describer.lookup_storage.clear()


def _trace_releasing_parameters(trace):
    @functools.wraps(trace)
    def traced(mod, example_args, example_kwargs=None):
        exported_program = trace(mod, example_args, example_kwargs)
        release_parameter_references(exported_program)
        return exported_program
    return traced


def install() -> None:
    """Once per process: ``pipeline()``'s export releases the parameters it traced."""
    replace_once(Pipe, "_trace_with_export", _trace_releasing_parameters)
