"""What happens when an aten op reaches a tensor on a simulated device.

Unwrap device tensors to their host tensors, check that devices are not mixed, run the CPU
kernel, wrap the outputs back onto the device, and report the op to the recording sinks.
Kept lean: this runs once per op and its overhead is the device's overhead.
"""
from __future__ import annotations

import torch

from backend import recording
from backend.recording import SIMULATED_DEVICE_TYPES, STREAM as _STREAM

from . import fake_values, numerics, timing_only
from .collective_scope import device_collective
from .device_module import reported_device
from .freed_storage import freed_storage_error
from .host_kernels import HOST_KERNELS
from .state import STATE as _DEVICE_STATE
from .tensor import DeviceTensor, carry_math_bits, wrap

_TIMING = timing_only.STATE
_FREED = _DEVICE_STATE.freed
_NUMERICS = numerics.SWITCH
_FAKE_VALUES = fake_values.STATE

__all__ = ["dispatch", "CROSS_DEVICE_OPS", "SIMULATED_DEVICE_TYPES"]

aten = torch.ops.aten

# Ops that legitimately take a host tensor next to a device tensor (copies, CPU indices).
CROSS_DEVICE_OPS = frozenset({
    aten.copy_.default, aten._to_copy.default, aten._copy_from.default,
    aten._copy_from_and_resize.default, aten.index.Tensor, aten.index_put_.default,
    aten.index_put.default, aten._index_put_impl_.default, aten.lift_fresh.default,
})


class _OpFacts:
    """What dispatch needs to know about one op overload, worked out on its first call."""

    __slots__ = ("call", "mutates", "is_view", "collective", "written_only")

    def __init__(self, func):
        # OpOverload.__call__ only forwards to the C++ op: call that directly. Ops CPU has no
        # kernel for (SDPA's fused path) run the device's host kernel.
        self.call = HOST_KERNELS.get(func) or (func._op if type(func) is torch._ops.OpOverload else func)
        self.is_view = func.is_view
        # Functional collectives (DTensor's) and their wait_tensor: the host kernel calls the
        # process group, which records the collective (and DeviceWork.wait its wait) on the
        # collectives lane; the op itself is not recorded again (it is no host fallback).
        self.collective = func.namespace == "_c10d_functional"
        # Whether the op may return one of its arguments (in-place and out= ops).
        self.mutates = func._schema.is_mutable or any(
            r.alias_info is not None for r in func._schema.returns) and not func.is_view
        # Arguments the op only writes (out=, copy_'s destination): reading freed bytes is an
        # error, writing them is not.
        self.written_only = frozenset(
            a.name for a in func._schema.arguments
            if a.alias_info is not None and a.alias_info.is_write and a.kwarg_only) | (
            {"self"} if func in _WRITES_SELF_UNREAD else frozenset())


# Ops whose ``self`` is overwritten without being read, or rebound (set_, resize_).
_WRITES_SELF_UNREAD = frozenset({
    aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default,
    aten.set_.source_Tensor, aten.set_.source_Storage, aten.set_.source_Storage_storage_offset,
    aten.set_.default, aten.resize_.default,
})
_FACTS = recording.OpFactsCache(_OpFacts)


def _raise_mixed(first: torch.device, second: torch.device):
    raise RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{first} and {second}!")


class _Args:
    """Host-side arguments of one op, plus the device they came from."""

    __slots__ = ("device", "host_tensor", "inputs", "operands")

    def __init__(self, operands):
        self.operands = operands    # the op's own arguments, to place tracer factories (below)
        self.device = None
        self.host_tensor = None     # first non-scalar CPU tensor among the arguments
        self.inputs = []            # host tensors read by the op (for the recording)

    def unwrap(self, value):
        if isinstance(value, DeviceTensor):
            device = value.device
            if self.device is None:
                self.device = device
            elif device != self.device:
                _raise_mixed(self.device, device)
            inner = value._inner
            self.inputs.append(inner)
            return inner
        if isinstance(value, torch.Tensor):
            if value.device.type in SIMULATED_DEVICE_TYPES:
                # Only under a tracer: a factory ran in FakeTensorMode and made a plain fake
                # tensor on the device; use its host side, as for a DeviceTensor's inner
                # (data-free, meta, next to data-free device tensors, so they stay one device).
                if self.device is None:
                    self.device = value.device
                args, kwargs = self.operands
                host = value.to(timing_only.host_device(_inners((*args, *kwargs.values()))))
                self.inputs.append(host)
                return host
            if self.host_tensor is None and value.dim() > 0:
                self.host_tensor = value
            self.inputs.append(value)
            return value
        if value.__class__ in (list, tuple) and value and not isinstance(value[0], (int, float)):
            return value.__class__(self.unwrap(v) for v in value)
        if isinstance(value, torch.UntypedStorage) and value.device.type in SIMULATED_DEVICE_TYPES:
            # A wrapper's storage is a data-less placeholder: its values live in the host tensor.
            raise RuntimeError(
                f"a {value.device} storage holds no values the host kernels can read; pass the "
                f"tensor itself (e.g. t.set_(source_tensor)) instead of its untyped_storage()")
        return value


def _inners(values):
    for v in values:
        if isinstance(v, DeviceTensor):
            yield v._inner
        elif v.__class__ in (list, tuple):
            yield from _inners(v)


_PLAIN = frozenset({int, float, bool, type(None), torch.dtype, torch.memory_format})


def dispatch(func, args, kwargs):
    # Fast path for the common call: positional device tensors and plain Python values only.
    if not kwargs:
        device = None
        host_args = []
        for a in args:
            cls = a.__class__
            if cls is DeviceTensor:
                if device is None:
                    device = a.device
                elif a.device != device:
                    break
                host_args.append(a._inner)
            elif cls in _PLAIN:
                host_args.append(a)
            else:
                break
        else:
            if device is not None:
                return _execute(func, _FACTS.of(func), args, kwargs, host_args, {}, device, None, None)
    return _dispatch_general(func, args, kwargs)


def _dispatch_general(func, args, kwargs):
    state = _Args((args, kwargs))
    unwrap = state.unwrap
    host_args = [unwrap(a) for a in args]
    target = None          # explicit device= argument (e.g. _to_copy(device=...))
    host_kwargs = {}
    for key, value in kwargs.items():
        if key == "device" and value is not None:
            target = reported_device(torch.device(value))
        else:
            host_kwargs[key] = unwrap(value)
    if target is not None:
        if target.type in SIMULATED_DEVICE_TYPES:
            source = state.inputs[0] if state.inputs else None
            host_kwargs["device"] = timing_only.host_device(
                state.inputs, *((source.numel(), source.element_size()) if source is not None else ()))
        elif timing_only.has_data_free(state.inputs):
            raise timing_only.no_values_error(f"copying a {state.device} tensor to {target} (.cpu(), .to())")
        else:
            host_kwargs["device"] = target
    if state.host_tensor is not None and func not in CROSS_DEVICE_OPS:
        _raise_mixed(state.device, state.host_tensor.device)
    facts = _FACTS.of(func)
    if facts.collective:
        with device_collective():
            return _execute(func, facts, args, kwargs, host_args, host_kwargs, state.device, target, state.inputs)
    return _execute(func, facts, args, kwargs, host_args, host_kwargs, state.device, target, state.inputs)


def _execute(func, facts, args, kwargs, host_args, host_kwargs, device, target, inputs):
    """Run the host kernel, wrap its outputs onto ``device`` and report the op.

    ``facts``: the op's ``_OpFacts``; ``inputs``: the host tensors the op read, for the
    recording; None on the fast path, where they are collected only if someone is recording.
    """
    if _FREED.any and not facts.is_view:
        _refuse_freed_reads(func, facts, args, kwargs)
    losing = ()
    if _TIMING.ever_enabled:
        host_args, host_kwargs, losing = timing_only.unify(func, host_args, host_kwargs)
        if losing:
            _refuse_host_targets(func, args, kwargs, losing)
    if _FAKE_VALUES.any:
        fake_values.check_read(func, args, host_args, host_kwargs, target)
    try:
        out = None
        if _NUMERICS.enabled:
            out = numerics.maybe_autocast(func, host_args, host_kwargs)
        if out is None:
            out = facts.call(*host_args, **host_kwargs)
    except NotImplementedError as exc:
        # No host kernel (e.g. fused RNN cells PyTorch picks for accelerators): run the op's
        # decomposition on the device tensors, so its pieces are executed and recorded.
        decomposition = _decomposition(func)
        if _reads_data_free(host_args, host_kwargs):
            timing_only.check_decomposable(func, decomposition, exc)
        if decomposition is None:
            raise
        return decomposition(*args, **kwargs)
    except RuntimeError as exc:
        if _reads_data_free(host_args, host_kwargs):
            timing_only.check_value_reader(func, exc)
        raise

    if _FAKE_VALUES.any:
        fake_values.propagate(func, host_args, host_kwargs, _host_outputs(out))
    if losing:
        out = _drop_values(func, out, losing)
    if target is not None:
        device = target if target.type in SIMULATED_DEVICE_TYPES else None
    mutates = facts.mutates
    if isinstance(out, torch.Tensor):
        wrapped = _wrap_returned(out, args, kwargs, device) if mutates else _wrap_new(out, device)
    elif isinstance(out, (tuple, list)):
        wrapped = out.__class__(
            (_wrap_returned(o, args, kwargs, device) if mutates else _wrap_new(o, device))
            if isinstance(o, torch.Tensor) else o for o in out)
    else:
        wrapped = out
    if facts.is_view:
        # Views are how tensors acquire conj/neg bits (conj(), _neg_view, imag of a conj).
        for w in (wrapped if isinstance(wrapped, (tuple, list)) else (wrapped,)):
            if w.__class__ is DeviceTensor:
                carry_math_bits(w)
    # recording.STREAM.listening, inlined: hot path
    if _STREAM.sinks and not facts.collective and not (_STREAM.suspended_threads and _STREAM.suspended_here()):
        host_outputs = _host_outputs(out)
        # Tracer (fake) outputs mean torch.compile is tracing: that is not an executed op.
        if all(t.__class__ is torch.Tensor for t in host_outputs):
            if inputs is None:
                inputs = [h for h, a in zip(host_args, args) if a.__class__ is DeviceTensor]
            recording.emit(func, args, kwargs, inputs, host_outputs,
                           transfer=_transfer_kind(func, args, device))
    return wrapped


def _refuse_host_targets(func, args, kwargs, losing) -> None:
    """Raise if a data-free result would be written into a host tensor (``cpu_tensor.copy_(t)``):
    no device dispatch guards its reads, so it cannot be marked as holding no values."""
    inners = {id(inner) for inner in _inners((*args, *kwargs.values()))}
    if any(id(target) not in inners for target, _ in losing):
        raise timing_only.no_values_error(f"{func._schema.name} writing into a host tensor with values")


def _drop_values(func, out, losing):
    """``out`` with the written arguments in place of the data-free twins the op wrote, those
    arguments marked as holding no values (``timing_only.unify``)."""
    originals = {id(twin): target for target, twin in losing}
    for target, twin in losing:
        if target.shape != twin.shape:          # an out= op resized its output
            target.resize_(twin.shape)
    fake_values.drop([target for target, _ in losing], func._schema.name)
    if isinstance(out, torch.Tensor):
        return originals.get(id(out), out)
    if isinstance(out, (tuple, list)):
        return out.__class__(originals.get(id(o), o) for o in out)
    return out


def _refuse_freed_reads(func, facts, args, kwargs) -> None:
    """Raise if ``func`` would read bytes ``untyped_storage().resize_()`` freed."""
    names = [a.name for a in func._schema.arguments]
    for name, value in (*zip(names, args), *kwargs.items()):
        if name in facts.written_only:
            continue
        for tensor in (value if value.__class__ in (list, tuple) else (value,)):
            if tensor.__class__ is DeviceTensor:
                shortfall = _FREED.shortfall(tensor._inner)
                if shortfall is not None:
                    raise freed_storage_error(str(func), tensor.device, *shortfall)


def _reads_data_free(host_args, host_kwargs) -> bool:
    return timing_only.has_data_free(host_args) or timing_only.has_data_free(host_kwargs.values())


def _decomposition(func):
    from torch._decomp import decomposition_table

    return decomposition_table.get(func)


def _wrap_new(out, device):
    return out if device is None else wrap(out, device)


def _wrap_returned(out, args, kwargs, device):
    # In-place and out= ops return one of their arguments: hand back that very object.
    for a in (*args, *kwargs.values()):
        if a is out:
            return a
        if isinstance(a, DeviceTensor) and a._inner is out:
            if a.shape != out.shape or a.stride() != out.stride() or a.storage_offset() != out.storage_offset():
                _restride_wrapper(a, out)
            return a
    return _wrap_new(out, device)


_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)


def _restride_wrapper(wrapper: DeviceTensor, inner: torch.Tensor) -> None:
    """Give ``wrapper`` the geometry its host tensor took (resize_, set_, out= resizing).

    The wrapper's own storage is a data-less placeholder, so the Meta kernel of ``set_``
    re-describes it (sizes, strides, offset; the placeholder grows by bookkeeping only).
    """
    set_ = aten.set_.source_Storage_storage_offset
    set_.redispatch(_META, wrapper, wrapper.untyped_storage(), inner.storage_offset(),
                    inner.size(), inner.stride())


def _host_outputs(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [o for o in out if isinstance(o, torch.Tensor)]
    return []


def _transfer_kind(func, args, out_device):
    if func is aten.copy_.default:
        dst_on_device = isinstance(args[0], DeviceTensor)
        src_on_device = isinstance(args[1], DeviceTensor)
        if dst_on_device != src_on_device:
            return "h2d" if dst_on_device else "d2h"
    elif func is aten._to_copy.default and out_device is None:
        return "d2h"
    elif func is aten._local_scalar_dense.default:
        return "d2h"
    return None


def _torch_dispatch(cls, func, types, args=(), kwargs=None):
    return dispatch(func, args, kwargs or {})


# Registered on the tensor type here, so tensor.py need not import its own dispatcher.
DeviceTensor.__torch_dispatch__ = classmethod(_torch_dispatch)
