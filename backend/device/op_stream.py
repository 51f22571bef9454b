"""What the device tells the op stream (``backend.recording``) that the stream cannot see
itself: which NeuronCore target the device models, and which ops ran under hardware numerics.

The op stream sits below the device, so the device plugs in here rather than the stream
reaching up into the device's state. Imported by ``backend.device``.
"""
from __future__ import annotations

import torch

from backend.recording import record_tagger, set_target_source

from . import numerics

__all__ = ["autocast_tag"]


@record_tagger
def autocast_tag(func, host_inputs) -> dict | None:
    """Hardware numerics run fp32 matmuls on TensorE at the bf16 rate: say so in the record."""
    if (numerics.hardware_numerics_enabled() and func in numerics.MATMUL_OPS
            and any(t.dtype == torch.float32 for t in host_inputs)):
        return {"autocast": "bfloat16"}
    return None


def _selected_target():
    from .neuron_module import get_target

    return get_target()


set_target_source(_selected_target)
