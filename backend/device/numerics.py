"""Hardware numerics: make neuron's values drift the way a NeuronCore's would.

Off by default (then neuron equals CPU). When on, fp32 matmul-like ops are computed as the
Neuron compiler runs them by default: inputs auto-cast to bf16, products accumulated in fp32
(PSUM is fp32), result returned in fp32. bf16 inputs already run that way on the host kernels.
"""
from __future__ import annotations

import contextlib

import torch

__all__ = ["set_hardware_numerics", "hardware_numerics_enabled", "hardware_numerics", "MATMUL_OPS", "maybe_autocast",
           "HardwareNumericsSwitch", "SWITCH"]

aten = torch.ops.aten
MATMUL_OPS = frozenset({
    aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
    aten.convolution.default, aten.matmul.default, aten.linear.default,
})


class HardwareNumericsSwitch:
    """Whether hardware numerics are on, process-wide. ``enabled`` is a plain attribute
    because the device reads it once per op."""

    __slots__ = ("enabled",)

    def __init__(self) -> None:
        self.enabled = False

    def reset(self) -> None:
        self.enabled = False


SWITCH = HardwareNumericsSwitch()


def set_hardware_numerics(enabled: bool = True) -> None:
    SWITCH.enabled = bool(enabled)


def hardware_numerics_enabled() -> bool:
    return SWITCH.enabled


@contextlib.contextmanager
def hardware_numerics(enabled: bool = True):
    previous = SWITCH.enabled
    SWITCH.enabled = bool(enabled)
    try:
        yield
    finally:
        SWITCH.enabled = previous


def _bf16(value):
    # Round to bf16 but keep fp32 storage: products of bf16 values are exact in fp32, so the
    # fp32 kernel then accumulates exactly like TensorE into fp32 PSUM.
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(torch.bfloat16).to(torch.float32)
    return value


def maybe_autocast(func, host_args: list, host_kwargs: dict):
    """Run ``func`` under hardware numerics if it applies; None means "run it normally"."""
    if not SWITCH.enabled or func not in MATMUL_OPS:
        return None
    if not any(isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in host_args):
        return None
    return func(*[_bf16(a) for a in host_args], **{k: _bf16(v) for k, v in host_kwargs.items()})
