"""Several NeuronCores per chip: ``neuron:0..N-1``, per-core memory books, the current core,
logical NeuronCores (LNC=2) and the Neuron runtime's environment variables."""
import gc

import pytest
import torch

from backend.device import neuron_module
from backend.sim.logical_cores import ENGINE_SPEEDUP, logical_core
from backend.sim.presets import GiB, get_target
from backend.sim.topology import get_topology, per_core


@pytest.fixture
def cores(monkeypatch):
    """The default target with no LNC choice and no env settings; core 0 current again after."""
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    neuron_module.SELECTION.reset()
    torch.neuron.set_target("trn2")
    gc.collect()
    yield
    torch.neuron.set_device(0)
    neuron_module.SELECTION.reset()
    monkeypatch.undo()
    torch.neuron.set_target("trn2")


# -- one device per core ---------------------------------------------------------------------------
def test_each_core_of_the_chip_is_a_device(cores):
    assert torch.neuron.device_count() == 8 == get_target("trn2").cores_per_chip
    x = torch.ones(4, device="neuron:3")
    assert x.device == torch.device("neuron", 3)
    assert (x * 2).device == torch.device("neuron", 3)
    assert x.to("neuron:5").device == torch.device("neuron", 5)
    torch.neuron.set_target("trn1")
    assert torch.neuron.device_count() == 2


def test_each_core_has_its_own_memory_books(cores):
    before = [torch.neuron.memory_allocated(i) for i in range(4)]
    x = torch.empty(1024, dtype=torch.float32, device="neuron:3")
    assert torch.neuron.memory_allocated(3) == before[3] + 4096
    assert torch.neuron.memory_allocated("neuron:3") == before[3] + 4096
    assert [torch.neuron.memory_allocated(i) for i in (0, 1, 2)] == before[:3]
    del x
    assert torch.neuron.memory_allocated(3) == before[3]


def test_out_of_memory_is_per_core(cores):
    torch.neuron.set_target(get_target("trn2").derive(hbm_bytes=1 << 20))
    held = torch.empty(200_000, dtype=torch.float32, device="neuron:1")       # 0.8 MB of 1 MiB
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
        torch.empty(200_000, dtype=torch.float32, device="neuron:1")
    other = torch.empty(200_000, dtype=torch.float32, device="neuron:2")      # another core's HBM
    assert torch.neuron.memory_allocated(2) == other.nbytes and held.nbytes == other.nbytes


def test_mixing_cores_in_one_op_raises_like_pytorch(cores):
    a, b = torch.ones(3, device="neuron:0"), torch.ones(3, device="neuron:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found "
                                           "at least two devices, neuron:0 and neuron:1!"):
        a + b
    with pytest.raises(RuntimeError, match="same device.*neuron:1 and neuron:0"):
        torch.mm(b.view(3, 1), a.view(1, 3))


def test_set_device_and_the_device_context_pick_the_current_core(cores):
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device(2)
    assert torch.neuron.current_device() == 2 == torch.accelerator.current_device_index()
    assert torch.ones(1, device="neuron").device == torch.device("neuron", 2)
    assert torch.tensor([1.0], device="neuron").device == torch.device("neuron", 2)
    with torch.neuron.device(5):
        assert torch.neuron.current_device() == 5
        assert torch.zeros(1, device="neuron").device == torch.device("neuron", 5)
        assert torch.neuron.memory_allocated() == torch.neuron.memory_allocated(5)
    assert torch.neuron.current_device() == 2


def test_backward_runs_on_a_core_other_than_zero(cores):
    x = torch.randn(4, 4, device="neuron:6", requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.device == torch.device("neuron", 6)
    torch.testing.assert_close(x.grad.cpu(), 2 * x.detach().cpu())


def test_a_core_beyond_the_chip_is_a_clear_error(cores):
    with pytest.raises(RuntimeError, match=r"invalid device ordinal 8 \(this machine has 8 NeuronCores"):
        torch.ones(1, device="neuron:8")
    torch.neuron.set_target("trn1")
    with pytest.raises(RuntimeError, match=r"invalid device ordinal 2 \(this machine has 2 NeuronCores"):
        torch.neuron.set_device(2)


# -- NEURON_RT_VISIBLE_CORES ------------------------------------------------------------------------
def test_visible_cores_limit_and_renumber_the_devices(cores, monkeypatch):
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "4-6")
    torch.neuron.set_target("trn2")
    assert torch.neuron.device_count() == 3
    assert torch.ones(1, device="neuron:2").device == torch.device("neuron", 2)
    with pytest.raises(RuntimeError, match="invalid device ordinal 3"):
        torch.ones(1, device="neuron:3")
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "1,3")
    assert torch.neuron.set_target("trn2") and torch.neuron.device_count() == 2


def test_visible_cores_outside_the_chip_are_refused(cores, monkeypatch):
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-8")
    with pytest.raises(RuntimeError, match="names NeuronCore 8, but the simulated chip has 8"):
        torch.neuron.set_target("trn2")
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "a-b")
    with pytest.raises(ValueError, match="expected core ids and ranges"):
        torch.neuron.set_target("trn2")


# -- logical NeuronCores ----------------------------------------------------------------------------
def test_the_lnc2_core_is_two_physical_cores(cores):
    trn2, lnc2 = get_target("trn2"), get_target("trn2/lnc2")
    assert lnc2.name == "trn2/lnc2" and lnc2 == logical_core(trn2, 2)
    assert lnc2.cores_per_chip == 4
    assert lnc2.hbm_bytes == 24 * GiB                        # 96 GiB per chip / 4 logical cores
    assert lnc2.hbm_bytes_per_s == 2.9e12 / 4                 # 2.9 TB/s per chip / 4
    assert lnc2.dma_engines == 32
    assert ENGINE_SPEEDUP.value == 2.0
    assert lnc2.tensor_clock_hz == 4.8e9 and lnc2.vector_clock_hz == 1.92e9
    assert lnc2.scalar_clock_hz == 2.4e9 and lnc2.gpsimd_clock_hz == 2.4e9
    assert lnc2.peak_flops_per_s == 2 * trn2.peak_flops_per_s == 128 * 128 * 2 * 4.8e9
    assert (lnc2.sbuf_bytes, lnc2.psum_bytes) == (trn2.sbuf_bytes, trn2.psum_bytes)   # per physical core
    assert "ASSUMPTION lnc.engine_speedup" in lnc2.source("tensor_clock_hz")
    assert logical_core(trn2, 1) is trn2                      # LNC=1: the stock preset, unchanged


def test_lnc2_is_refused_where_the_runtime_has_no_such_config(cores):
    with pytest.raises(ValueError, match="logical NeuronCore config 2 is not supported on trn1"):
        get_target("trn1/lnc2")
    torch.neuron.set_target("trn1")
    with pytest.raises(ValueError, match="not supported on trn1"):
        torch.neuron.set_logical_nc_config(2)


def test_set_logical_nc_config_halves_the_devices(cores):
    assert torch.neuron.get_logical_nc_config() == 1 and torch.neuron.get_target().name == "trn2"
    config = torch.neuron.set_logical_nc_config(2)
    assert config.name == "trn2/lnc2" and torch.neuron.get_target() is config
    assert torch.neuron.device_count() == 4 and torch.neuron.get_logical_nc_config() == 2
    assert torch.neuron.get_device_properties(3).total_memory == 24 * GiB
    with pytest.raises(RuntimeError, match=r"invalid device ordinal 4 \(this machine has 4 NeuronCores"):
        torch.ones(1, device="neuron:4")
    torch.neuron.set_target("trn2")                  # the LNC choice stays with the process
    assert torch.neuron.get_target().name == "trn2/lnc2"
    torch.neuron.set_logical_nc_config(1)
    assert torch.neuron.device_count() == 8 and torch.neuron.get_target().name == "trn2"


def test_the_environment_variable_selects_the_lnc(cores, monkeypatch):
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    assert torch.neuron.set_target("trn2").name == "trn2/lnc2"
    assert torch.neuron.device_count() == 4
    assert torch.neuron.set_target("trn2", lnc=1).name == "trn2"          # the API wins over the env
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "two")
    with pytest.raises(ValueError, match="use 1 or 2"):
        torch.neuron.set_target("trn2")


@pytest.mark.parametrize("value", ["0", "-1", "3", "1.5", "nan", "inf", "two"])
def test_an_lnc_other_than_1_or_2_is_refused(cores, monkeypatch, value):
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", value)          # "0" used to mean unset
    with pytest.raises(ValueError, match=rf"NEURON_LOGICAL_NC_CONFIG='{value}' is not a logical NeuronCore "
                                         r"config; use 1 or 2"):
        torch.neuron.set_target("trn2")
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", " ")             # blank: unset, the default
    assert torch.neuron.set_target("trn2").name == "trn2"


def test_a_logical_core_config_passes_through_set_target(cores):
    lnc2 = get_target("trn2/lnc2")
    assert torch.neuron.set_target(lnc2) is lnc2 and torch.neuron.device_count() == 4
    with pytest.raises(ValueError, match="is a logical core at LNC=2, not LNC=1"):
        torch.neuron.set_target(lnc2, lnc=1)


def test_collective_topology_counts_logical_cores_as_ranks():
    chip = get_topology("trn2")
    assert per_core(chip, get_target("trn2")).devices_per_node == chip.devices_per_node * 8
    assert per_core(chip, get_target("trn2/lnc2")).devices_per_node == chip.devices_per_node * 4
    assert per_core(chip, 4) == per_core(chip, get_target("trn2/lnc2"))


def test_a_profile_without_a_target_times_the_logical_core_selected():
    import workbench as wb
    try:
        torch.neuron.set_logical_nc_config(2)
        with wb.profile() as prof:
            a = torch.ones(512, 512, device="neuron")
            a @ a
        assert prof.meta["target"] == "trn2/lnc2"
    finally:
        torch.neuron.set_logical_nc_config(1)
    with wb.profile() as prof:
        torch.ones(4, device="neuron") + 1
    assert prof.meta["target"] == "trn2"
