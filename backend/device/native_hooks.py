"""The C++ half of the ``neuron`` device: allocator, PrivateUse1 hooks and device guard.

PyTorch takes a PrivateUse1 allocator, ``PrivateUse1HooksInterface`` (beyond the three methods
the Python hooks expose) and a device guard with ``synchronizeDevice`` only from C++. Without
them ``torch.UntypedStorage(n, device="neuron")`` dereferences a missing allocator and kills the
process, and ``torch.accelerator.synchronize()`` / ``memory_allocated()`` raise.
``csrc/neuron_hooks.cpp`` provides them; it is compiled on first use with
``torch.utils.cpp_extension`` (cached under ``~/.cache/torch_extensions``, or
``$TORCH_EXTENSIONS_DIR``; concurrent first imports wait on its file lock) and loaded with
ctypes, so the build needs no pybind11 and no Python headers.

It must be installed before ``_setup_privateuseone_for_python_backend``: PyTorch keeps the
first hooks and guard registered for PrivateUse1, and the Python defaults are then skipped.
Without a C++ compiler the device still works through the Python defaults, minus those APIs.
"""
from __future__ import annotations

import atexit
import ctypes
import fcntl
import hashlib
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import torch

__all__ = ["install_native_hooks", "build_library", "native_hooks_installed", "INSTALLED", "report_device_count",
           "native_current_device", "set_native_current_device", "native_storage_bytes"]

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "neuron_hooks.cpp"
EXTENSION_NAME = "neuron_workbench_hooks"
# -O1: the code is glue; the time goes to parsing PyTorch's headers, not optimizing.
CFLAGS = ["-O1", "-g0"]

_STATS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64))
_RESET_FN = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int)
_EVENT_STAMP_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)
_EVENT_ELAPSED_FN = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_int64, ctypes.c_int64)
_EVENT_RELEASE_FN = ctypes.CFUNCTYPE(None, ctypes.c_int64)
# Bit flags returned by neuron_install (see the Installed enum in the C++ source).
INSTALLED = {"allocator": 1, "hooks": 2, "guard": 4}


class _State:
    """What was installed in this process, and the ctypes callbacks C++ keeps pointers to."""

    def __init__(self) -> None:
        self.flags: int | None = None
        self.callbacks: tuple = ()
        self.library = None     # the loaded library, for the current-device and count calls


STATE = _State()


def _device_books(device: int):
    from .memory import memory_for

    return memory_for(torch._C._get_privateuse1_backend_name(), device)


def _pool_stats(device: int, out) -> int:
    books = _device_books(device)
    if books is None:
        return 0
    values = (books.allocated_bytes, books.peak_allocated_bytes, books.reserved_bytes,
              books.peak_reserved_bytes, books.num_allocs, books.num_frees, books.num_ooms,
              books.capacity_bytes)
    for i, value in enumerate(values):
        out[i] = int(value)
    return 1


def _pool_reset(device: int, peak_only: int) -> None:
    books = _device_books(device)
    if books is None:
        return
    books.reset_peak()
    if not peak_only:
        books.num_allocs = books.num_frees = books.num_ooms = 0


def _event_stamp(previous: int) -> int:
    # Called from C++ (ctypes cannot raise into it): 0 says it failed.
    try:
        from backend.recording import current_target

        from .event_clock import NATIVE_EVENTS

        return NATIVE_EVENTS.stamp(previous, current_target)
    except Exception:
        logger.exception("stamping a neuron timing event failed")
        return 0


def _event_elapsed(start: int, end: int) -> float:
    from .event_clock import NATIVE_EVENTS

    return NATIVE_EVENTS.elapsed_ms(start, end)


def _event_release(handle: int) -> None:
    from .event_clock import NATIVE_EVENTS

    NATIVE_EVENTS.release(handle)


def _install_event_clock(library) -> tuple:
    """Give C++ timing events the simulated clock; taken back at exit, before Python goes."""
    callbacks = (_EVENT_STAMP_FN(_event_stamp), _EVENT_ELAPSED_FN(_event_elapsed), _EVENT_RELEASE_FN(_event_release))
    library.neuron_set_event_clock.argtypes = [_EVENT_STAMP_FN, _EVENT_ELAPSED_FN, _EVENT_RELEASE_FN]
    library.neuron_set_event_clock(*callbacks)
    atexit.register(library.neuron_set_event_clock, _EVENT_STAMP_FN(), _EVENT_ELAPSED_FN(), _EVENT_RELEASE_FN())
    return callbacks


def _build_directory(source: Path = SOURCE, name: str = EXTENSION_NAME, cflags: list = CFLAGS,
                     include_paths: list = ()) -> Path:
    # Keyed by everything the binary depends on, so a cached build is never stale.
    key = hashlib.sha256(source.read_bytes())
    key.update(" ".join([*cflags, *map(str, include_paths), torch.__version__, sys.version]).encode())
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions"
    return Path(root) / f"{name}-{key.hexdigest()[:16]}"


def build_library(source: Path = SOURCE, name: str = EXTENSION_NAME, *, cflags: tuple = (),
                  include_paths: tuple = ()) -> str:
    """The path of the compiled library of ``source``, building it only when no finished build
    exists (``cflags`` beyond ``CFLAGS``, ``include_paths`` beyond torch's own).

    A finished build leaves a stamp naming the library; reading it skips importing
    torch.utils.cpp_extension (and setuptools), which would add about 0.4 s to ``import torch``.
    """
    cflags, include_paths = [*CFLAGS, *cflags], [str(p) for p in include_paths]
    directory = _build_directory(source, name, cflags, include_paths)
    stamp = directory / "built"
    if stamp.is_file():
        return stamp.read_text()
    missing = [tool for tool in ("c++", "ninja") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"building them needs {' and '.join(missing)}, not found on PATH")
    directory.mkdir(parents=True, exist_ok=True)
    # torch's own build lock is a plain file that outlives a killed build and then blocks every
    # later import forever. An flock dies with its process: whoever holds it is the only builder,
    # so a torch lock found then is stale and goes.
    with open(directory / "build.flock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if stamp.is_file():   # built by another process while this one waited
            return stamp.read_text()
        (directory / "lock").unlink(missing_ok=True)
        return _compile(source, name, cflags, include_paths, directory, stamp)


def _compile(source: Path, name: str, cflags: list, include_paths: list, directory: Path, stamp: Path) -> str:
    from torch.utils.cpp_extension import load

    started = time.perf_counter()
    logger.info("Compiling the neuron device's %s (first use only) into %s", source.name, directory)
    path = load(name=name, sources=[str(source)], extra_cflags=cflags, extra_include_paths=include_paths,
                build_directory=str(directory), is_python_module=False, verbose=False)
    logger.info("Compiled the neuron device's %s in %.1f s", source.name, time.perf_counter() - started)
    partial = directory / f"built.{os.getpid()}"
    partial.write_text(path)
    partial.replace(stamp)   # atomic: another process never reads a half-written stamp
    return path


def _refuse_device_storages() -> None:
    """Without an allocator, PyTorch dereferences a null pointer allocating a device storage:
    raise instead, for the direct way to ask for one."""
    base_new = torch._C.StorageBase.__new__

    def new(cls, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type == torch._C._get_privateuse1_backend_name():
            raise RuntimeError(
                f"Storages on the {torch.device(device).type} device need its C++ allocator, "
                f"which could not be built (see the warning above); allocate a tensor instead "
                f"(torch.empty(n, dtype=torch.uint8, device=...)).")
        return base_new(cls, *args, **({"device": device} if device is not None else {}), **kwargs)

    torch.UntypedStorage.__new__ = new


def native_hooks_installed() -> dict[str, bool]:
    """Which C++ pieces this process registered (all False when the build was unavailable)."""
    flags = STATE.flags or 0
    return {name: bool(flags & bit) for name, bit in INSTALLED.items()}


def install_native_hooks() -> bool:
    """Build (first time only), load and register the C++ pieces. Idempotent.

    Returns False, with a warning, when no C++ compiler is available or the build fails; the
    device then keeps PyTorch's Python-backend defaults.
    """
    if STATE.flags is not None:
        return STATE.flags != 0
    try:
        library = ctypes.CDLL(build_library())
    except Exception as error:   # a missing or broken toolchain must not make the device unusable
        logger.warning(
            "The neuron device runs without its C++ hooks (%s): torch.UntypedStorage(..., "
            "device='neuron'), torch.accelerator.synchronize() and torch.accelerator.memory_*() "
            "are unavailable. Install g++ and ninja (apt-get install g++ ninja-build) to enable "
            "them.", error)
        STATE.flags = 0
        _refuse_device_storages()
        return False
    library.neuron_install.restype = ctypes.c_int
    library.neuron_install.argtypes = [_STATS_FN, _RESET_FN]
    STATE.callbacks = (_STATS_FN(_pool_stats), _RESET_FN(_pool_reset))
    STATE.flags = library.neuron_install(*STATE.callbacks[:2])
    STATE.callbacks += _install_event_clock(library)
    library.neuron_current_device.restype = ctypes.c_int
    library.neuron_storage_bytes.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    STATE.library = library
    logger.debug("neuron C++ hooks installed: %s", native_hooks_installed())
    return True


def report_device_count(count: int) -> None:
    """Tell the C++ hooks and guard how many NeuronCores exist (the count they report only grows)."""
    if STATE.library is not None:
        STATE.library.neuron_set_device_count(int(count))


def native_current_device() -> int | None:
    """This thread's current NeuronCore as the C++ guard keeps it (None without the C++ hooks)."""
    return None if STATE.library is None else STATE.library.neuron_current_device()


def set_native_current_device(index: int) -> bool:
    """Make ``index`` this thread's current NeuronCore in C++; False without the C++ hooks."""
    if STATE.library is None:
        return False
    STATE.library.neuron_set_current_device(int(index))
    return True


def native_storage_bytes(device: int) -> tuple[int, int]:
    """Current and peak bytes of the storages the C++ allocator made on NeuronCore ``device``
    (``torch.UntypedStorage(n, device="neuron:i")``): device memory outside the tensor books."""
    if STATE.library is None:
        return 0, 0
    out = (ctypes.c_int64 * 2)()
    STATE.library.neuron_storage_bytes(int(device), out)
    return int(out[0]), int(out[1])
