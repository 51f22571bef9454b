"""The op stream: records of what ran on a simulated device, and the sinks that consume them.

This layer sits below both ``backend.device`` (which emits one OpRecord per eager aten op) and
``backend.compile`` (which emits one per fused kernel); neither of those imports the other, they
meet here. It imports torch and ``backend.sim`` only.

- Sinks (the simulator sessions) subscribe with ``recording(sink)``; with no sink nobody builds
  records at all, so recording costs nothing when nobody listens. ``suspended()`` hides the
  ops of the thread that suspends (e.g. while a compiler traces them) from every sink; other
  threads' ops are still recorded.
- A sink receives the ops of the thread that opened it (so two threads profiling at once keep
  their runs apart), including the backward ops autograd runs for that thread on its device
  worker threads; ``recording(sink, all_threads=True)`` receives every thread's ops.
- ``make_record``/``emit`` turn one executed op into an OpRecord. Layers above add attributes
  they alone know (the device: hardware-numerics autocast) through ``@record_tagger``.
- ``SIMULATED_DEVICE_TYPES`` names the device types whose ops are simulated (``neuron``, and
  ``cuda`` while CUDA emulation is on); ``current_target()`` is the NeuronCore target the
  simulated device models, as the device layer reports it through ``set_target_source``.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import threading
from typing import Callable

import torch

from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.presets import NeuronConfig, get_target

__all__ = ["recording", "active_sinks", "SinkEntry", "op_origin", "suspended", "make_record", "emit",
           "tensor_desc", "OpFactsCache", "record_tagger", "remove_tagger", "OpStream", "STREAM", "SIMULATED_DEVICE_TYPES", "current_target", "set_target_source"]

_SCALARS = (int, float, bool, str, type(None))
# Ops whose schema does not say "view" but which only re-describe existing memory.
ZERO_COPY_OPS = frozenset({"aten::_unsafe_view", "aten::lift_fresh", "aten::_reshape_alias", "aten::as_strided_",
                           "aten::squeeze_", "aten::unsqueeze_", "aten::t_", "aten::transpose_", "aten::swapdims_"})
SIMULATED_DEVICE_TYPES = {"neuron"}   # "cuda" joins while CUDA emulation is on
# Key of the recording thread's id in torch's thread-local Python objects: the autograd engine
# copies those into the device worker thread that runs a backward pass, so ops of a backward
# are attributed to the thread that called it.
_ORIGIN_KEY = "neuron_workbench.recording_origin"


def op_origin() -> int:
    """Which thread an op issued now belongs to: this thread, or for backward ops run on an
    autograd worker thread, the recording thread that started the backward pass."""
    if torch._C._is_key_in_tls(_ORIGIN_KEY):
        return torch._C._get_obj_in_tls(_ORIGIN_KEY)
    return threading.get_ident()


class SinkEntry(tuple):
    """``(sink, with_source)`` as consumers unpack it, plus ``owner``: the thread whose ops the
    sink receives (None: every thread's)."""

    def __new__(cls, sink, with_source: bool, owner: int | None):
        entry = super().__new__(cls, (sink, with_source))
        entry.owner = owner
        return entry


class OpStream:
    """Who listens to the op stream and what the layers above told it (one per process).

    ``sinks`` is replaced, never mutated, so a thread iterating it while another subscribes
    sees a consistent list; ``listening`` is the dispatcher's one-attribute fast-path check.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sinks: tuple = ()
        self.active_memo: tuple | None = None    # active_sinks()'s last answer
        # Threads inside ``suspended()``: a count, so the hot path reads one attribute while
        # no thread is suspended; each thread's own depth is in ``suspension``.
        self.suspended_threads = 0
        self.suspension = threading.local()
        self.taggers: tuple = ()
        self.target_source: Callable[[], NeuronConfig] | None = None
        self.counter = itertools.count()
        # Per thread: how deep its open sinks nest and whose ops they take (left to the
        # ``recording`` blocks that set it: reset() cannot close them).
        self.opened = threading.local()

    @property
    def listening(self) -> bool:
        return bool(self.sinks) and not (self.suspended_threads and self.suspended_here())

    def suspended_here(self) -> bool:
        """Whether the calling thread is inside ``suspended()``."""
        return getattr(self.suspension, "depth", 0) > 0

    def suspend(self) -> None:
        depth = getattr(self.suspension, "depth", 0)
        if depth == 0:
            with self._lock:
                self.suspended_threads += 1
        self.suspension.depth = depth + 1

    def resume(self) -> None:
        self.suspension.depth -= 1
        if self.suspension.depth == 0:
            with self._lock:
                self.suspended_threads -= 1

    def subscribe(self, entry) -> None:
        with self._lock:
            self.sinks = (*self.sinks, entry)
            self.active_memo = None

    def unsubscribe(self, entry) -> None:
        with self._lock:
            sinks = list(self.sinks)
            sinks.remove(entry)
            self.sinks = tuple(sinks)
            self.active_memo = None     # let go of the closed sink

    def reset(self) -> None:
        """Drop every sink and this thread's suspension (tests); taggers and the target source
        stay, as the device layer registers them once at import."""
        with self._lock:
            self.sinks = ()
            self.active_memo = None
            if self.suspended_here():
                self.suspended_threads -= 1
            self.suspension.depth = 0


STREAM = OpStream()


class OpFactsCache(dict):
    """Facts about each op overload, built once by ``build(func)`` at its first use.

    Keyed by id: hashing an OpOverload is a Python call, and look-ups run once per op. Each
    entry keeps its op, so an id reused after a custom op was freed is rebuilt, not mistaken.
    """

    __slots__ = ("build",)

    def __init__(self, build: Callable) -> None:
        super().__init__()
        self.build = build

    def of(self, func):
        entry = self.get(id(func))
        if entry is None or entry[0] is not func:
            entry = self[id(func)] = (func, self.build(func))
        return entry[1]


def active_sinks() -> tuple:
    """``(sink, with_source)`` entries that should receive an op issued now: those opened by
    the op's thread or for all threads (empty while this thread is suspended)."""
    sinks = STREAM.sinks
    if not sinks or (STREAM.suspended_threads and STREAM.suspended_here()):
        return ()
    origin = op_origin()
    # ``sinks`` is replaced, never mutated: the last answer holds while it and the origin are
    # the same (the usual case: one thread profiling). One tuple, so threads read it whole.
    memo = STREAM.active_memo
    if memo is not None and memo[0] is sinks and memo[1] == origin:
        return memo[2]
    active = tuple(e for e in sinks if e.owner is None or e.owner == origin)
    STREAM.active_memo = (sinks, origin, active)
    return active


def _claim_origin() -> int:
    """Mark this thread as a recording origin (nested sinks share it); returns its id."""
    opened = STREAM.opened
    depth = getattr(opened, "depth", 0)
    if depth == 0:
        opened.owner = op_origin()      # a sink opened inside a backward pass keeps its origin
        opened.stashed = not torch._C._is_key_in_tls(_ORIGIN_KEY)
        if opened.stashed:
            torch._C._stash_obj_in_tls(_ORIGIN_KEY, opened.owner)
    opened.depth = depth + 1
    return opened.owner


def _release_origin() -> None:
    opened = STREAM.opened
    opened.depth -= 1
    if opened.depth == 0 and opened.stashed:
        # Erase, not overwrite: a Python object left in torch's TLS at thread exit deadlocks.
        torch._C._remove_obj_from_tls(_ORIGIN_KEY)


@contextlib.contextmanager
def recording(sink, *, with_source: bool = False, all_threads: bool = False):
    """Feed every op executed on a simulated device to ``sink.feed(record)`` while active:
    the ops of this thread (and of backward passes it starts), or with ``all_threads`` every
    thread's ops."""
    owner = None if all_threads else _claim_origin()
    entry = SinkEntry(sink, with_source, owner)
    STREAM.subscribe(entry)
    try:
        yield sink
    finally:
        STREAM.unsubscribe(entry)
        if not all_threads:
            _release_origin()


@contextlib.contextmanager
def suspended():
    """Run this thread's device ops without recording them (e.g. while a compiler traces
    them); other threads keep recording."""
    STREAM.suspend()
    try:
        yield
    finally:
        STREAM.resume()


def record_tagger(tagger: Callable) -> Callable:
    """Register ``tagger(func, host_inputs) -> dict | None``: extra attrs for each record.

    For facts the op stream cannot see itself, e.g. the device's hardware numerics running an
    fp32 matmul at the bf16 rate. Registering the same tagger twice is an error.
    """
    if tagger in STREAM.taggers:
        raise RuntimeError(f"record tagger {tagger.__qualname__} is already registered")
    STREAM.taggers = (*STREAM.taggers, tagger)
    return tagger


def remove_tagger(tagger: Callable) -> None:
    STREAM.taggers = tuple(t for t in STREAM.taggers if t is not tagger)


def set_target_source(source: Callable[[], NeuronConfig] | None) -> None:
    """Tell the op stream where the simulated device's selected target comes from."""
    STREAM.target_source = source


def current_target() -> NeuronConfig:
    """The NeuronCore target the simulated device models now (the preset default until a
    device layer has registered its selection with ``set_target_source``)."""
    source = STREAM.target_source
    return source() if source is not None else get_target()


def tensor_desc(t: torch.Tensor) -> TensorDesc:
    """The simulator's descriptor of a tensor: shape, dtype name, strides (None if not strided)."""
    if t.__class__ is not torch.Tensor:
        # A tracer's tensor (torch.compile) may have symbolic sizes: never hash those.
        return TensorDesc(tuple(t.shape), str(t.dtype)[6:], tuple(t.stride()) if t.layout == torch.strided else None)
    # Real tensors repeat a few geometries: share one (immutable) descriptor per geometry.
    key = (t.shape, t.dtype, t.stride() if t.layout == torch.strided else None)
    desc = _DESCS.get(key)
    if desc is None:
        if len(_DESCS) >= _DESCS_MAX:
            _DESCS.clear()
        shape, dtype, strides = key
        desc = _DESCS[key] = TensorDesc(tuple(shape), str(dtype)[6:], strides)
    return desc


_DESCS: dict = {}                     # (shape, dtype, strides) -> TensorDesc
_DESCS_MAX = 4096                     # dynamic shapes must not grow it without bound


class _RecordFacts:
    """What a record of one op overload always says: its name, whether it only aliases, and
    which arguments are attributes (non-tensor)."""

    __slots__ = ("name", "is_view", "attr_positions")

    def __init__(self, func):
        self.name = func._schema.name
        self.is_view = func.is_view or self.name in ZERO_COPY_OPS
        self.attr_positions = [(i, a.name) for i, a in enumerate(func._schema.arguments)
                               if "Tensor" not in str(a.type)]


_RECORD_FACTS = OpFactsCache(_RecordFacts)


def _plain(value):
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, _SCALARS) for v in value):
        return list(value)
    if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return str(value)
    return None


def _source_line() -> str | None:
    frame = sys._getframe(3)
    while frame is not None:
        name = frame.f_code.co_filename
        if "/torch/" not in name and "/backend/" not in name and "/contextlib" not in name:
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def make_record(func, args, kwargs, host_inputs, host_outputs, *, transfer=None, with_source=False) -> OpRecord:
    """Build the OpRecord of one executed op from its host-side inputs and outputs."""
    facts = _RECORD_FACTS.of(func)
    attrs = {}
    for i, name in facts.attr_positions:
        value = args[i] if i < len(args) else kwargs.get(name)
        plain = _plain(value)
        if plain is not None:
            attrs[name] = plain
    for tagger in STREAM.taggers:
        attrs.update(tagger(func, host_inputs) or ())
    return OpRecord(
        index=next(STREAM.counter),
        name=facts.name,
        inputs=tuple([tensor_desc(t) for t in host_inputs]),
        outputs=tuple([tensor_desc(t) for t in host_outputs]),
        attrs=attrs,
        is_view=facts.is_view,
        transfer=transfer,
        source=_source_line() if with_source else None,
    )


def emit(func, args, kwargs, host_inputs, host_outputs, transfer=None) -> None:
    """Feed the record of one executed op to every active sink (built once per ``with_source``
    setting: a profile listens with two sinks, its simulator and its memory sampler)."""
    records = {}
    for sink, with_source in active_sinks():
        record = records.get(with_source)
        if record is None:
            record = records[with_source] = make_record(func, args, kwargs, host_inputs, host_outputs,
                                                        transfer=transfer, with_source=with_source)
        sink.feed(record)
