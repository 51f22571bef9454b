"""PyTorch's device-generic accelerator API on ``neuron``, served by the device's C++ hooks
(backend/device/csrc/neuron_hooks.cpp): storages allocated on the device, ``torch.accelerator``
synchronisation, memory statistics and device selection.

What could kill the interpreter runs in a child process, so a crash fails one test instead of
ending the run.
"""
import contextlib
import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from backend.device.native_hooks import native_hooks_installed

REPO = Path(__file__).resolve().parents[2]


def _run(code: str, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environment, timeout=300, cwd=REPO)


def test_the_cpp_hooks_are_installed_ahead_of_the_python_defaults():
    assert native_hooks_installed() == {"allocator": True, "hooks": True, "guard": True}


def test_a_storage_allocated_on_the_device_is_real_and_resizes():
    result = _run("""
        import torch, backend.device
        backend.device.register()
        storage = torch.UntypedStorage(16, device="neuron")
        assert storage.device == torch.device("neuron", 0) and storage.nbytes() == 16
        storage.resize_(64)
        assert storage.nbytes() == 64
        storage.resize_(0)
        assert storage.nbytes() == 0
        storage.resize_(8)
        assert storage.nbytes() == 8
        print("alive")
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "alive" in result.stdout


def test_what_the_device_cannot_do_with_a_storage_raises_instead_of_crashing():
    result = _run("""
        import torch, backend.device
        backend.device.register()
        storage = torch.UntypedStorage(16, device="neuron")
        for attempt in (lambda: torch.UntypedStorage(8, device="neuron:8"), storage.cpu, lambda: str(storage),
                        lambda: torch.tensor([], device="neuron").set_(storage)):
            try:
                attempt()
            except RuntimeError as error:
                print("raised:", str(error)[:80])
        print("alive")
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("raised:") == 4 and "alive" in result.stdout


def test_accelerator_synchronize_returns_once_the_device_is_idle(neuron):
    y = torch.ones(4, device=neuron) * 2
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(0)
    torch.neuron.synchronize()
    assert y.sum().item() == 8


def test_accelerator_memory_statistics_are_the_devices_books(neuron):
    before = torch.accelerator.memory_allocated()
    assert before == torch.neuron.memory_allocated()
    x = torch.empty(1024, dtype=torch.float32, device=neuron)
    assert torch.accelerator.memory_allocated() == before + 4096 == torch.neuron.memory_allocated()
    assert torch.accelerator.max_memory_allocated() >= before + 4096
    assert torch.accelerator.memory_reserved() == torch.neuron.memory_reserved()
    del x
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == before == torch.neuron.max_memory_allocated()
    free, total = torch.accelerator.get_memory_info()
    assert total == torch.neuron.get_device_properties(0).total_memory and free == total - before


def test_a_storage_made_by_the_allocator_counts_until_it_is_freed(neuron):
    before = torch.accelerator.memory_allocated()
    storage = torch.UntypedStorage(256, device=neuron)
    assert torch.accelerator.memory_allocated() == before + 256
    del storage
    assert torch.accelerator.memory_allocated() == before


@contextlib.contextmanager
def _on_core(how: str):
    """Ask for a storage on NeuronCore 3 the ways PyTorch code does; yields the device argument."""
    if how == "index":
        yield "neuron:3"
    elif how == "torch.device":
        yield torch.device("neuron", 3)
    elif how == "device_context":
        with torch.neuron.device(3):
            yield "neuron"
    else:
        torch.neuron.set_device(3)
        try:
            yield "neuron"
        finally:
            torch.neuron.set_device(0)


@pytest.mark.parametrize("how", ["index", "torch.device", "device_context", "set_device"])
def test_a_storage_is_made_on_the_core_asked_for_and_counted_there(neuron, how):
    """torch.UntypedStorage(n, device=...) lands on that core; its memory_allocated counts it,
    the other cores' do not, in torch.neuron and torch.accelerator alike."""
    before = [torch.neuron.memory_allocated(i) for i in range(8)]
    with _on_core(how) as device:
        storage = torch.UntypedStorage(1024, device=device)
    assert storage.device == torch.device("neuron", 3)
    after = [torch.neuron.memory_allocated(i) for i in range(8)]
    assert [a - b for a, b in zip(after, before)] == [0, 0, 0, 1024, 0, 0, 0, 0]
    assert torch.accelerator.memory_allocated(3) == after[3] and torch.accelerator.memory_allocated(0) == before[0]
    assert torch.neuron.max_memory_allocated(3) >= after[3]
    free, total = torch.neuron.mem_get_info(3)
    assert free == total - after[3]
    storage.resize_(4096)                                   # stays on its core
    assert storage.device.index == 3 and torch.neuron.memory_allocated(3) == before[3] + 4096
    del storage
    assert [torch.neuron.memory_allocated(i) for i in range(8)] == before


def test_the_current_accelerator_is_neuron_with_a_device_per_core(neuron):
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.is_available() and torch.accelerator.device_count() == 8   # trn2's cores
    torch.accelerator.set_device_index(3)
    assert torch.accelerator.current_device_index() == 3 == torch.neuron.current_device()
    torch.accelerator.set_device_index(0)
    assert torch.accelerator.current_device_index() == 0
    with pytest.raises(RuntimeError, match="Invalid device index neuron:8: the simulated chip has 8"):
        torch.accelerator.set_device_index(8)
    assert isinstance(torch.accelerator.current_stream(), torch.Stream)


def test_a_cached_build_loads_without_the_compiler_toolchain():
    # Importing torch.utils.cpp_extension (setuptools) would cost every import of torch.
    result = _run("""
        import sys, torch, backend.device
        backend.device.register()
        from backend.device.native_hooks import native_hooks_installed
        assert all(native_hooks_installed().values()), native_hooks_installed()
        assert "torch.utils.cpp_extension" not in sys.modules
        print("alive")
    """, PATH="/nonexistent")
    assert result.returncode == 0, result.stderr[-2000:]


def test_without_a_compiler_the_device_works_and_device_storages_raise(tmp_path):
    result = _run("""
        import torch, backend.device
        backend.device.register()
        from backend.device.native_hooks import native_hooks_installed
        assert not any(native_hooks_installed().values())
        assert (torch.ones(2, device="neuron") + 1).sum().item() == 4
        try:
            torch.UntypedStorage(16, device="neuron")
        except RuntimeError as error:
            print("raised:", error)
        assert torch.UntypedStorage(4).nbytes() == 4
        print("alive")
    """, PATH="/nonexistent", TORCH_EXTENSIONS_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "raised: Storages on the neuron device need its C++ allocator" in result.stdout
    assert "Install g++ and ninja" in result.stderr


@pytest.mark.slow
def test_a_build_killed_earlier_does_not_block_the_next_import(tmp_path, monkeypatch):
    # A killed first build leaves torch's lock file behind; torch would wait on it forever.
    from backend.device import native_hooks

    code = """
        import torch, backend.device
        backend.device.register()
        from backend.device.native_hooks import native_hooks_installed
        assert all(native_hooks_installed().values()), native_hooks_installed()
        print("alive")
    """
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    directory = native_hooks._build_directory()
    directory.mkdir(parents=True)
    (directory / "lock").write_text("")
    result = _run(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "alive" in result.stdout and (directory / "built").is_file()


def test_a_device_parameters_storage_resizes_like_fsdp2_needs(neuron):
    # FSDP2 frees and re-allocates unsharded parameters with untyped_storage().resize_().
    # Counted against what earlier tests in this process still hold (the books are per process).
    gc.collect()
    held = torch.neuron.memory_allocated()
    param = torch.nn.Parameter(torch.randn(4, 3, device=neuron))
    values = param.detach().cpu()
    param.untyped_storage().resize_(0)
    assert param.untyped_storage().nbytes() == 0 and torch.neuron.memory_allocated() == held
    param.untyped_storage().resize_(48)
    assert param.untyped_storage().nbytes() == 48 and torch.neuron.memory_allocated() == held + 48
    # The host bytes were kept: a read in between could not have crashed the interpreter.
    assert torch.equal(param.detach().cpu(), values)


def test_the_storage_of_a_view_resizes_the_bytes_its_base_reads(neuron):
    base = torch.zeros(4, device=neuron)
    view = base[:2]
    view.untyped_storage().resize_(64)
    view.fill_(1)
    assert base.tolist() == [1.0, 1.0, 0.0, 0.0] and view.untyped_storage().nbytes() == 64
