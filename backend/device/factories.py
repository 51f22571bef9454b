"""Allocation kernels for the simulated devices, registered on their dispatch keys.

Only the two primitive allocators are needed: every factory (zeros, randn, arange, eye, ...)
allocates through them and then fills the result through the device's dispatch.
"""
from __future__ import annotations

from math import prod

import torch

from .device_module import reported_device
from .memory import memory_for
from .state import STATE
from .tensor import wrap
from .timing_only import HOST, META, host_device, is_data_free, no_values_error
from .timing_only import STATE as TIMING

__all__ = ["register_factories", "unregister_factories"]


def _device_of(device) -> torch.device:
    return reported_device(torch.device(device))


def _precheck(device: torch.device, nbytes: int) -> None:
    # Fail before touching host memory, so an impossible request never allocates.
    pool = memory_for(device.type, device.index)
    if pool is not None:
        pool.check(nbytes)


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    device = _device_of(device)
    dtype = dtype or torch.get_default_dtype()
    _precheck(device, prod(size) * dtype.itemsize)
    host = torch.empty(size, dtype=dtype, device=host_device((), prod(size), dtype.itemsize),
                       memory_format=memory_format or torch.contiguous_format)
    return wrap(host, device)


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    device = _device_of(device)
    dtype = dtype or torch.get_default_dtype()
    extent = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    _precheck(device, extent * dtype.itemsize)
    return wrap(torch.empty_strided(size, stride, dtype=dtype, device=host_device((), extent, dtype.itemsize)), device)


def _copy_from(self, dst, non_blocking=False):
    # Reached when PyTorch copies host data into a device tensor with Python dispatch
    # excluded (torch.tensor(..., device=...)); a plain host-to-device transfer.
    from backend import recording

    from .tensor import unwrap_to_host

    host_dst, host_src = unwrap_to_host(dst), unwrap_to_host(self)
    if is_data_free(host_src) and not is_data_free(host_dst):
        raise no_values_error(f"copying a {self.device} tensor to {dst.device}")
    host_dst.copy_(host_src)
    if recording.active_sinks():
        recording.emit(torch.ops.aten._copy_from.default, (self, dst), {}, [unwrap_to_host(self)], [host_dst],
                       transfer="h2d" if host_dst is not dst else "d2h")
    return dst


# Factories whose composite kernels allocate an empty tensor and resize it; run them on the
# host and wrap the result instead (a wrapper cannot be resized in place).
HOST_FACTORIES = (
    "arange", "arange.start", "arange.start_step", "linspace", "logspace", "eye", "eye.m",
    "randperm", "tril_indices", "triu_indices", "scalar_tensor",
)


def _host_factory(overload):
    def factory(*args, device=None, **kwargs):
        device = _device_of(device)
        if TIMING.enabled:          # its size first (no values made), to see if it keeps values
            shape = overload(*args, device=META, **kwargs)
            host = host_device((), shape.numel(), shape.element_size())
            return wrap(shape if host == META else overload(*args, device=host, **kwargs), device)
        return wrap(overload(*args, device=HOST, **kwargs), device)

    return factory


# Composite ops that pick fused kernels PyTorch ships only for CUDA (_thnn_fused_*_cell) as
# soon as the input is on an accelerator; run PyTorch's own decompositions instead.
DECOMPOSED_ON_DEVICE = ("lstm.input", "lstm.data", "gru.input", "gru.data",
                        "rnn_tanh.input", "rnn_tanh.data", "rnn_relu.input", "rnn_relu.data")


def _lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    # The textbook LSTM cell (what _thnn_fused_lstm_cell computes on CUDA), in aten ops.
    h, c = hx
    gates = torch.nn.functional.linear(input, w_ih, b_ih) + torch.nn.functional.linear(h, w_hh, b_hh)
    in_gate, forget_gate, cell_gate, out_gate = gates.chunk(4, 1)
    cy = forget_gate.sigmoid() * c + in_gate.sigmoid() * cell_gate.tanh()
    return out_gate.sigmoid() * cy.tanh(), cy


def _gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    # The textbook GRU cell (what _thnn_fused_gru_cell computes on CUDA), in aten ops.
    i_r, i_z, i_n = torch.nn.functional.linear(input, w_ih, b_ih).chunk(3, 1)
    h_r, h_z, h_n = torch.nn.functional.linear(hx, w_hh, b_hh).chunk(3, 1)
    reset, update = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    new = (i_n + reset * h_n).tanh()
    return new + update * (hx - new)


def _register_decomposed(lib, dispatch_key: str) -> None:
    from torch._decomp import decomposition_table

    autograd_key = "Autograd" + dispatch_key
    for name in DECOMPOSED_ON_DEVICE:
        packet, _, overload = name.partition(".")
        lib.impl(name, decomposition_table[getattr(getattr(torch.ops.aten, packet), overload)], autograd_key)
    lib.impl("lstm_cell", _lstm_cell, autograd_key)
    lib.impl("gru_cell", _gru_cell, autograd_key)


def register_factories(dispatch_key: str) -> None:
    """Register the allocators on ``dispatch_key`` ("PrivateUse1", or "CUDA" for emulation)."""
    if dispatch_key in STATE.factory_libraries:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, dispatch_key)
    lib.impl("empty_strided", _empty_strided, dispatch_key)
    lib.impl("_copy_from", _copy_from, dispatch_key)
    for name in HOST_FACTORIES:
        packet, _, overload = name.partition(".")
        lib.impl(name, _host_factory(getattr(getattr(torch.ops.aten, packet), overload or "default")), dispatch_key)
    # A ZeroTensor has no storage and relies on a dispatch key that is excluded inside
    # __torch_dispatch__, so host kernels would read garbage: the device materializes it.
    lib.impl("_efficientzerotensor", _host_factory(torch.ops.aten.zeros.default), dispatch_key)
    _register_decomposed(lib, dispatch_key)
    STATE.factory_libraries[dispatch_key] = lib


def unregister_factories(dispatch_key: str) -> None:
    lib = STATE.factory_libraries.pop(dispatch_key, None)
    if lib is not None:
        lib._destroy()
