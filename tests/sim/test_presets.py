import dataclasses

import pytest

from backend.sim import spec
from backend.sim.gpu import GpuConfig, h100
from backend.sim.presets import (DEFAULT_GPU_TARGET, DEFAULT_NEURON_TARGET, GiB, MiB, NeuronConfig, TARGETS,
                                 derive, get_target, kinds, list_presets)
from backend.sim.spec import ASSUMPTION, HardwareConfig, format_quantity


def test_known_targets_and_default():
    assert set(TARGETS) == {"trn1", "trn2", "trn3"}
    assert get_target().name == DEFAULT_NEURON_TARGET == "trn2"
    assert get_target("TRN1").generation == "NC-v2"
    cfg = get_target("trn3")
    assert get_target(cfg) is cfg


def test_one_lookup_for_every_kind():
    assert kinds() == ("neuron", "gpu", "tpu")
    assert set(list_presets()) == {"trn1", "trn2", "trn3", "a100", "h100", "h200", "v5e", "v5p", "v6e"}
    assert set(list_presets("gpu")) == {"a100", "h100", "h200"}
    assert get_target("H100") is h100 and isinstance(get_target("h200"), GpuConfig)
    assert get_target(kind="gpu").name == DEFAULT_GPU_TARGET == "h100"
    assert get_target("trn2", kind="neuron") is TARGETS["trn2"]
    with pytest.raises(ValueError, match="unknown preset kind 'tpu9'; known: neuron, gpu, tpu"):
        list_presets("tpu9")


def test_unknown_target_lists_known():
    with pytest.raises(ValueError, match=r"^unknown target 'tpu'; known targets: a100, h100, h200, trn1, trn2, trn3, "
                                        r"v5e, v5p, v6e$"):
        get_target("tpu")
    with pytest.raises(ValueError, match=r"unknown target 'h100'; known neuron targets: trn1, trn2, trn3 "
                                         r"\('h100' is a gpu target: select it on the 'cuda' device"):
        get_target("h100", kind="neuron")
    with pytest.raises(ValueError, match="known neuron targets"):
        get_target(h100, kind="neuron")


@pytest.mark.parametrize("name", ["trn1", "trn2", "trn3", "a100", "h100", "h200"])
def test_every_field_has_unit_help_and_source_or_plausible_assumption(name):
    cfg = get_target(name)
    assert {f.name for f in dataclasses.fields(cfg)} - {f.name for f in cfg.spec_fields()} == \
        {"name", "sources", "ranges", "changes"}
    for row in cfg.to_records():
        assert row["help"] and isinstance(row["unit"], str), row
        src = row["source"]
        if src.startswith(ASSUMPTION):
            low, high = row["plausible"]
            assert low <= row["value"] <= high, row
        else:
            assert row["plausible"] is None, row
            assert any(k in src for k in ("nki", "about-neuron", "hardware.md", "datasheet", "PyTorch", "CUTLASS")), src


def test_an_assumption_without_a_range_is_refused():
    with pytest.raises(TypeError, match="plausible"):
        spec.spec(1.0, unit="ns", source=ASSUMPTION + ": a guess", help="x")


def test_explain_and_table():
    trn2 = get_target("trn2")
    text = trn2.explain("sbuf_bytes")
    assert text.startswith("trn2.sbuf_bytes = 28 MiB: state buffer") and "224 KiB" in text
    assert "plausible: 2,000 ns .. 20,000 ns" in trn2.explain("launch_overhead_ns")
    assert trn2.source("hbm_bytes") != get_target("trn1").source("hbm_bytes")   # per-preset sources
    table = h100.table().splitlines()
    assert table[0] == "gpu preset h100" and len(table) == 1 + len(GpuConfig.spec_fields())
    assert any(line.split()[:3] == ["hbm_bytes_per_s", "3.35", "TB/s"] for line in table)
    with pytest.raises(ValueError, match="NeuronConfig has no field 'sbuf'"):
        trn2.explain("sbuf")


def test_format_quantity():
    assert format_quantity(28 * MiB, "B") == "28 MiB"
    assert format_quantity(80e9, "B") == "80 GB"            # vendors' decimal capacity stays decimal
    assert format_quantity(2.4e9, "Hz") == "2.4 GHz"
    assert format_quantity(989e12, "FLOP/s") == "989 TFLOP/s"
    assert format_quantity(True, "") == "True" and format_quantity(None, "FLOP/s") == "None"


def test_published_figures():
    trn1, trn2, trn3 = (get_target(n) for n in ("trn1", "trn2", "trn3"))
    assert trn1.peak_flops_per_s == pytest.approx(91.75e12, rel=1e-3)      # 92 TFLOPS
    assert trn2.peak_flops_per_s == pytest.approx(78.64e12, rel=1e-3)      # 79 TFLOPS
    assert (trn1.hbm_bytes, trn2.hbm_bytes, trn3.hbm_bytes) == (16 * GiB, 12 * GiB, 18 * GiB)
    assert trn1.hbm_bytes_per_s == pytest.approx(410e9)
    assert trn2.hbm_bytes_per_s == pytest.approx(362.5e9)
    assert (trn1.sbuf_bytes, trn2.sbuf_bytes, trn3.sbuf_bytes) == (24 * MiB, 28 * MiB, 32 * MiB)
    assert trn1.psum_bank_bytes == 2048 and trn2.psum_banks == 8
    assert trn1.dma_fixed_latency_ns == 1300
    assert trn1.vector_gpsimd_share_sbuf and not trn2.vector_gpsimd_share_sbuf
    # 16 engines x 23 B/ns exceed trn2's HBM share: the aggregate DMA rate is capped by it
    assert trn2.dma_bytes_per_s == pytest.approx(362.5e9)
    assert trn1.dma_bytes_per_s == pytest.approx(16 * 17e9)


def test_derive_what_if():
    big = derive("trn2", sbuf_bytes=48 * MiB)
    assert big.sbuf_bytes == 48 * MiB and big.name == "trn2*"
    assert big.changes == (("sbuf_bytes", 48 * MiB),) and get_target("trn2").changes == ()
    assert big.tensor_clock_hz == get_target("trn2").tensor_clock_hz
    assert big.source("sbuf_bytes") == "what-if change of trn2 (was 28 MiB)"
    assert big.source("hbm_bytes") == get_target("trn2").source("hbm_bytes")
    assert "changed: sbuf_bytes" in big.table().splitlines()[0]
    bigger = big.derive(psum_banks=16)
    assert bigger.name == "trn2*" and bigger.changes == (("psum_banks", 16), ("sbuf_bytes", 48 * MiB))
    fast = derive("trn1", name="trn1-2xhbm", hbm_bytes_per_s=2 * get_target("trn1").hbm_bytes_per_s)
    assert fast.name == "trn1-2xhbm" and fast.generation == "NC-v2"
    assert isinstance(fast, NeuronConfig) and isinstance(fast, HardwareConfig)
    with pytest.raises(ValueError, match="unknown NeuronConfig fields: sbuf_megabytes; known: "):
        derive("trn2", sbuf_megabytes=1)
    with pytest.raises(ValueError, match="unknown NeuronConfig fields: changes"):
        derive("trn2", changes=())


def test_presets_stay_hashable_and_compare_by_value():
    trn2 = get_target("trn2")
    twin = derive(trn2, name="trn2", sbuf_bytes=trn2.sbuf_bytes)
    assert twin == trn2 and hash(twin) == hash(trn2)       # lru_caches key on configs


def test_a_preset_value_outside_its_assumption_range_is_refused():
    from backend.sim.topology import Topology

    with pytest.raises(ValueError, match="outside its plausible range"):
        Topology.cited("too-fast-network", inter_latency_ns=(100.0, ASSUMPTION + ": a guess"))
    fast = Topology.cited("neuronlink-network", inter_latency_ns=(2000.0, ASSUMPTION + ": NeuronLink", (500.0, 5000.0)))
    assert fast.info("inter_latency_ns").plausible == (500.0, 5000.0)
