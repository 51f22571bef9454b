"""``profile()``: record what runs on a simulated device and hand back a Profile.

    with wb.profile(target="trn2") as prof:   # prof fills in when the block ends
        y = model(x)
    prof = wb.profile(fn, x, device="cuda")   # runs fn(x); prof.result is its return value

A session sink (the NeuronCore ``EagerSession`` or the GPU ``GpuSession``) is subscribed to the
device's op stream with ``backend.recording.recording``; compiled graphs that ran in the block
(or were compiled during it) are attached to the Profile.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import threading
import time
from collections.abc import Callable

from backend.compile import compiled_graphs, register as register_compile_backend
from backend.sim import hardware_kinds as kinds
from backend.sim.tpu.timeline import COMPILED_PATH_NOTE
from workbench.profiles import Profile

__all__ = ["profile", "ProfileSession", "SIMULATED_DEVICES", "DEFAULT_TARGETS", "make_sink", "default_device",
           "compiled_graphs", "ensure_compile_backend"]

log = logging.getLogger(__name__)

SIMULATED_DEVICES = kinds.devices()
DEFAULT_TARGETS = {device: kinds.default_target(device) for device in SIMULATED_DEVICES}


def make_sink(device: str, target: str | None = None):
    """The simulator session that costs ops for ``device`` ("neuron", "cuda" or "tpu"); it keeps
    what it is fed, so its run can be replayed on other configs (``replay_ns``, error bands)."""
    if device not in SIMULATED_DEVICES:
        raise ValueError(f"no simulator for device {device!r}: profile() supports {SIMULATED_DEVICES}; "
                         "use compare() for measured CPU wall time")
    hardware = kinds.for_device(device)
    module, cls, target_keyword = hardware.session
    session = getattr(importlib.import_module(module), cls)
    return session(**{target_keyword: target or hardware.default_target}, keep_workload=True)


def ensure_compile_backend(name: str | None) -> None:
    """Make sure torch.compile's "neuron" backend is registered (again after torch._dynamo.reset())."""
    if name == "neuron":
        register_compile_backend()


@contextlib.contextmanager
def default_device(device: str, target: str | None = None, *, timing_only: bool = False):
    """Make ``device`` the default for new tensors while the block runs (``timing_only``: tensors
    made in it hold shapes, not values)."""
    from workbench.devices import use_device

    with use_device(device, target=target, timing_only=timing_only):
        yield


class _Sampler:
    """A second sink, fed after the simulator's: counts ops for progress bars and samples the
    device's allocated HBM at the simulated time each op ended (the allocation timeline)."""

    MAX_SAMPLES = 20_000

    def __init__(self, sink, device: str, on_op: Callable[[int], None] | None = None):
        self.sink, self.device, self.on_op = sink, device, on_op
        self.count = 0
        self.samples: list = []
        self.kernel_records: dict = {}     # id -> records of each compiled kernel that ran

    def feed(self, record) -> None:
        from backend.device.memory import memory_for
        self.count += 1
        pool, ops = memory_for(self.device), self.sink.trace.ops
        if pool is not None and ops:
            allocated = pool.allocated_bytes
            if not self.samples or self.samples[-1][1] != allocated:
                self.samples.append((ops[-1].end_ns, allocated))
                if len(self.samples) > self.MAX_SAMPLES:
                    # Long runs stay bounded: halve the resolution, keeping each pair's peak.
                    pairs = zip(self.samples[::2], self.samples[1::2])
                    self.samples = [max(pair, key=lambda s: s[1]) for pair in pairs]
        if self.on_op is not None:
            self.on_op(self.count)

    def feed_kernel(self, name, records, internal_bytes_saved=0, nodes=(), source=None) -> None:
        self.kernel_records.setdefault(id(records), records)
        self.feed(None)


def _target_in_effect(device: str):
    """The target a profile without one uses: for ``neuron``, the core the device simulates now
    (what ``set_device``, ``torch.neuron.set_target`` or the logical-core config chose, a derived
    what-if config included); for the others, the one ``set_device`` chose, else the default
    preset. Profiling a model held on a roomy what-if core, or on a logical (LNC=2) core, must not
    fall back to a different preset under it."""
    from workbench.devices import active_device

    if device == "neuron":
        import backend.device as device_layer
        return device_layer.get_target()
    state = active_device()
    if state.device == device and state.target:
        return state.target
    return DEFAULT_TARGETS[device]


class _ProfileTargets:
    """The NeuronCore target while ``profile(target=...)`` blocks run, on any threads.

    The device models one target per process: the one of the block entered last that is still
    open (each block's simulator costs its own target whatever the device models). When the
    last open block ends, the target from before the first comes back, in whatever order
    overlapping blocks on different threads end.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list = []          # [token, target] of each open block, oldest first
        self._before = None            # the target before the first open block

    def enter(self, target) -> object:
        import backend.device as device_layer
        with self._lock:
            if not self._open:
                self._before = device_layer.get_target()
            token = object()
            self._open.append((token, target))
            self._select(target)
            return token

    def exit(self, token) -> None:
        with self._lock:
            self._open = [entry for entry in self._open if entry[0] is not token]
            self._select(self._open[-1][1] if self._open else self._before)
            if not self._open:
                self._before = None

    @staticmethod
    def _select(target) -> None:
        import backend.device as device_layer
        current = device_layer.get_target()
        if current is not target and current.name != target:
            device_layer.set_target(target)


_PROFILE_TARGETS = _ProfileTargets()


class ProfileSession:
    """Context manager behind ``profile()``: ``__enter__`` returns the Profile it fills on exit."""

    def __init__(self, device: str = "neuron", target: str | None = None, *, source: bool = True,
                 on_op: Callable[[int], None] | None = None, meta: dict | None = None,
                 graphs_since: int | None = None, timing_only: bool = False):
        if device not in SIMULATED_DEVICES:
            make_sink(device)            # raises the explanatory ValueError
        self.device = device
        self.target = target or _target_in_effect(device)
        self.source = source
        self.on_op = on_op
        self.timing_only = timing_only
        self.meta = {"device": device, "target": getattr(self.target, "name", self.target), "device_kind": device,
                     "timing_only": timing_only, **({"timing": COMPILED_PATH_NOTE} if kinds.for_device(device).compiled_timing else {}),
                     **(meta or {})}
        self.profile: Profile | None = None     # the run in progress or the last one
        self._stack: contextlib.ExitStack | None = None
        # Graphs compiled by a warm-up run before the block still belong to this profile.
        self._graphs_since = graphs_since

    def __enter__(self) -> Profile:
        if self._stack is not None:
            raise RuntimeError("this profile() is already recording: a profile object cannot be entered again "
                               "before its `with` block ends (nest a new wb.profile() instead)")
        self._stack = contextlib.ExitStack()
        try:
            return self._start()
        except BaseException:
            self._stack.close()
            self._stack = None
            raise

    def _start(self) -> Profile:
        """Open one run: each ``with`` of this object records into a new Profile."""
        from backend.recording import recording
        self.profile = Profile(meta=self.meta)
        self.profile._set_recording(True)
        self.sink = make_sink(self.device, self.target)
        if self.device == "neuron":
            # Profiling is not a switch: the target before the block comes back when it ends.
            token = _PROFILE_TARGETS.enter(self.target)
            self._stack.callback(_PROFILE_TARGETS.exit, token)
        self._graphs_before = len(compiled_graphs()) if self._graphs_since is None else self._graphs_since
        from backend.device.timing_only import is_timing_only, timing_only, values_kept
        if self.timing_only:
            self._stack.enter_context(timing_only())    # tensors made in the block hold no values
        self.profile.meta["timing_only"] = is_timing_only()   # also when the mode was already on
        self._values_kept = values_kept()
        from backend.distributed import distributed_info
        if (rank_info := distributed_info()) is not None:
            self.profile.meta["distributed"] = rank_info       # the group may be gone by export time
        self._stack.enter_context(recording(self.sink, with_source=self.source))
        self.sampler = _Sampler(self.sink, kinds.for_device(self.device).host_device, self.on_op)
        self._stack.enter_context(recording(self.sampler, with_source=self.source))   # shares the simulator's record
        self._started = time.perf_counter()
        from backend.device.events import simulated_clock_ns
        self.profile._step_clock = lambda: simulated_clock_ns(self.sink)   # for Profile.step()
        return self.profile

    def _graphs(self) -> list:
        """Graphs compiled during the block and graphs whose kernels ran in it (a model
        compiled by a warm-up call before the block runs graphs compiled earlier)."""
        ran = list(self.sampler.kernel_records.values())
        return [g for i, g in enumerate(compiled_graphs())
                if i >= self._graphs_before or (ran and g.ran(ran))]

    def __exit__(self, exc_type, exc, tb) -> bool:
        wall = time.perf_counter() - self._started
        self.profile._step_clock = None
        stack, self._stack = self._stack, None
        stack.close()
        self.profile.meta["wall_time_s"] = wall
        from backend.device.timing_only import values_kept
        kept, before = values_kept(), self._values_kept
        if kept != before:      # small tensors that kept values in timing-only mode, and ops on them
            self.profile.meta["timing_only_values"] = {k: kept[k] - before[k] for k in kept}
        graphs = self._graphs()
        trace = self.sink.trace
        if not trace.hbm_timeline:      # the simulator did not track allocations itself
            trace.hbm_timeline = list(self.sampler.samples)
        # Keep what ran before an exception: a partial profile helps find the failing op.
        self.profile._attach([trace], graphs)
        self.profile.workload = getattr(self.sink, "workload", None)
        self.profile.workload_target = getattr(self.sink, "target", None) or getattr(self.sink, "config", None)
        self.profile.replay = getattr(self.sink, "replay_ns", None)
        if exc_type is not None:
            self.profile.meta["error"] = f"{exc_type.__name__}: {exc}"
        log.debug("profiled %d ops on %s %s in %.3f s", len(self.sink.trace.ops), self.device, self.target, wall)
        return False


def profile(fn: Callable | None = None, *args, target: str | None = None, device: str = "neuron",
            source: bool = True, on_op: Callable[[int], None] | None = None, graphs_since: int | None = None,
            timing_only: bool = False, **kwargs):
    """Profile ``fn(*args, **kwargs)`` on ``device``, or return a context manager when ``fn`` is None.

    ``target`` defaults to the one ``set_device`` chose for ``device``, else trn2 for neuron, h100
    for cuda and v6e for tpu (the model runs on ``neuron``, timed by the TPU cost model on the
    compiled path); ``source`` records user source
    lines per op; ``on_op(count)`` is called after every recorded op (progress bars);
    ``graphs_since`` (a ``len(compiled_graphs())`` taken earlier) attaches graphs compiled by a
    warm-up run before the profile started; ``timing_only`` makes tensors created while it runs
    hold no values (shapes only: ``torch.neuron.timing_only()``), for models the host cannot hold.
    """
    session = ProfileSession(device, target, source=source, on_op=on_op, graphs_since=graphs_since,
                             timing_only=timing_only)
    if fn is None:
        if args or kwargs:
            raise TypeError("profile() got arguments for fn but no fn")
        return session
    with session as prof:
        prof.result = fn(*args, **kwargs)
    return prof
