"""Host values that are not the values the program computed: reading them raises.

Two things leave them. One rank of a large fake world (``workbench.distributed.fake_world``) times its collectives but
moves no values between ranks, so what a collective leaves in its outputs is this rank's own
data (an all-reduce of 3.0 over 4 ranks stays 3.0), not what the world would compute. The
process group marks the host storages of such outputs; every op that reads a marked storage
marks the storages it writes, so ``loss / world_size`` is marked too; and handing a marked value
to Python or the host (``.item()``, ``.cpu()``, printing) raises :class:`FakeWorldValueError`,
as timing-only mode does for tensors without values. And a timing-only result written into a
tensor with values (``drop``: an optimizer step on real weights with timing-only gradients)
leaves that tensor's old bytes, which are no longer its values: its storage is marked the same
way and reads raise :class:`TimingOnlyError`. A clean overwrite of a whole storage
(``copy_``, ``fill_``, ``zero_``) clears its mark.

Marks live on the host ``UntypedStorage`` objects (PyTorch keeps one Python object per storage
while it lives), so views share them and a freed storage takes its mark with it. Nothing is
checked until the first mark (``STATE.any``), so runs without a fake world pay nothing.
"""
from __future__ import annotations

import torch

from backend.recording import SIMULATED_DEVICE_TYPES

from .timing_only import LEAVE_HINT, TimingOnlyError

__all__ = ["STATE", "FakeWorldValueError", "Origin", "mark", "drop", "origin", "error", "check_read", "propagate"]

aten = torch.ops.aten
_MARK = "_workbench_fake_world_origin"


class _State:
    __slots__ = ("any",)

    def __init__(self) -> None:
        self.any = False


STATE = _State()


class FakeWorldValueError(TimingOnlyError):
    """An operation needed values that a collective of a fake world did not compute."""


class Origin:
    """What left a storage without its values: ``source`` says what (``str()`` of the origin),
    ``fake_world`` whether a fake world's collective did (else a timing-only write)."""

    __slots__ = ("source", "fake_world")

    def __init__(self, source: str, fake_world: bool) -> None:
        self.source, self.fake_world = source, fake_world

    def __str__(self) -> str:
        return self.source


def _storage(host):
    # Tracer tensors (torch.compile's fake and functional tensors) and sparse layouts carry no
    # storage to mark.
    return host.untyped_storage() if host.__class__ is torch.Tensor and host.layout is torch.strided else None


def _mark(hosts, source: Origin) -> None:
    for host in hosts:
        storage = _storage(host)
        if storage is not None:
            setattr(storage, _MARK, source)
            STATE.any = True


def mark(hosts, collective: str, world_size: int) -> None:
    """Mark the storages of ``hosts`` as written by ``collective`` of a ``world_size`` fake world."""
    _mark(hosts, Origin(f"{collective} of a {world_size}-rank fake world", fake_world=True))


def drop(hosts, op: str) -> None:
    """Mark the storages of ``hosts`` as having lost their values to ``op`` writing a timing-only
    result into them."""
    _mark(hosts, Origin(f"{op} writing a timing-only result", fake_world=False))


def origin(host) -> Origin | None:
    """The collective whose missing values ``host`` holds, or None."""
    storage = _storage(host) if isinstance(host, torch.Tensor) else None
    return None if storage is None else getattr(storage, _MARK, None)


def _first_origin(values) -> Origin | None:
    for v in values:
        if isinstance(v, torch.Tensor):
            found = origin(v)
        elif v.__class__ in (list, tuple):
            found = _first_origin(v)
        else:
            continue
        if found is not None:
            return found
    return None


def error(what: str, source: Origin) -> TimingOnlyError:
    if not source.fake_world:
        return TimingOnlyError(
            f"{what} needs the values of a tensor that lost them to {source}: it holds stale "
            f"bytes, not values (tensors computed from timing-only tensors hold none); {LEAVE_HINT}.")
    return FakeWorldValueError(
        f"{what} needs values computed by {source}, which moves no values between ranks: the "
        f"tensor holds this rank's own data, not the world's result. A fake world times "
        f"collectives only; run the ranks for real (workbench.distributed.launch(fn, nprocs)) "
        f"to compute values.")


_READERS = {
    aten._local_scalar_dense.default: "Tensor.item() (or int(t), float(t), bool(t), `if t:`)",
    aten.equal.default: "torch.equal",
}
_COPIES = frozenset({aten.copy_.default, aten._copy_from.default, aten._copy_from_and_resize.default})
# Ops that overwrite every element of their first argument without reading it.
_OVERWRITES = frozenset({aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default})


def check_read(func, args, host_args, host_kwargs, target) -> None:
    """Raise if ``func`` hands a marked value to Python or host memory (``target``: the
    ``device=`` it copies to, if any)."""
    first = args[0] if args else None
    reads = func in _READERS or (target is not None and target.type not in SIMULATED_DEVICE_TYPES) or (
        func in _COPIES and isinstance(first, torch.Tensor) and first.device.type not in SIMULATED_DEVICE_TYPES)
    if not reads:
        return
    source = _first_origin((*host_args, *host_kwargs.values()))
    if source is not None:
        what = _READERS.get(func) or "copying to host memory (.cpu(), .tolist(), .numpy())"
        raise error(what, source)


def propagate(func, host_args, host_kwargs, host_outputs) -> None:
    """Mark what ``func`` wrote if it read a marked storage; clear a wholly overwritten one."""
    overwrites = func in _OVERWRITES and bool(host_args)
    read = (*host_args[overwrites:], *host_kwargs.values())   # an overwrite does not read its target
    source = _first_origin(read)
    if source is not None:
        for out in host_outputs:
            storage = _storage(out)
            if storage is not None:
                setattr(storage, _MARK, source)
    elif overwrites:
        target = host_args[0]
        storage = _storage(target) if isinstance(target, torch.Tensor) else None
        if storage is not None and hasattr(storage, _MARK) and \
                target.numel() * target.element_size() >= storage.nbytes():
            delattr(storage, _MARK)
