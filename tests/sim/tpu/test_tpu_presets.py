"""TPU presets: cited numbers, consistency of the derived clock, and the one lookup."""
from __future__ import annotations

import pytest

from backend.sim.presets import (DEFAULT_TARGETS, DEFAULT_TPU_TARGET, derive, get_target, kinds,
                                 list_presets)
from backend.sim.tpu import PRESETS, TpuConfig, get_tpu, v5e, v5p, v6e

MODEL_KNOBS = {"vpu_ops_per_cycle", "max_mxu_efficiency", "max_hbm_efficiency", "fp32_matmul_passes",
               "fusion_overhead_ns", "host_link_bytes_per_s"}


def test_every_number_names_its_source_and_assumptions_a_range():
    for config in PRESETS.values():
        for row in map(config.info, (f.name for f in TpuConfig.spec_fields())):
            assert row.source, f"{config.name}.{row.name} has no source"
            if row.is_assumption:
                assert row.plausible is not None, f"{config.name}.{row.name}"
    for knob in MODEL_KNOBS:
        assert v6e.info(knob).is_assumption
    assert "cloud.google.com/tpu/docs/v5p" in v5p.source("hbm_bytes_per_s")


@pytest.mark.parametrize("config, cores, mxus, size, bf16, hbm_bw, hbm", [
    (v5e, 1, 4, 128, 197e12, 819e9, 16e9),
    (v5p, 2, 4, 128, 459e12, 2765e9, 95e9),
    (v6e, 1, 4, 256, 918e12, 1638e9, 32e9),
])
def test_presets_carry_the_published_chip_numbers(config, cores, mxus, size, bf16, hbm_bw, hbm):
    assert (config.tensorcores_per_chip, config.mxus_per_core, config.mxu_size) == (cores, mxus, size)
    assert (config.bf16_flops_per_s, config.hbm_bytes_per_s, config.hbm_bytes) == (bf16, hbm_bw, hbm)
    # the clock is derived from the peak: MXUs x size^2 x 2 x clock reproduces it
    assert config.mxu_peak_from_clock == pytest.approx(config.bf16_flops_per_s, rel=0.005)
    assert config.peak_flops_per_s == config.bf16_flops_per_s


def test_interconnect():
    assert (v5e.ici_topology, v5p.ici_topology, v6e.ici_topology) == ("2D torus", "3D torus", "2D torus")
    assert (v5e.ici_bytes_per_s, v5p.ici_bytes_per_s, v6e.ici_bytes_per_s) == (400e9, 600e9, 800e9)
    assert (v5e.pod_chips, v5p.pod_chips, v6e.pod_chips) == (256, 8960, 256)


def test_vpu_rate():
    # 1 TensorCore x 128 lanes x 8 sublanes x 2 ops x 1.75 GHz
    assert v6e.vpu_flops_per_s == pytest.approx(128 * 8 * 2 * 1.75e9)
    assert v5p.vpu_flops_per_s == pytest.approx(2 * 128 * 8 * 2 * 1.75e9)


def test_the_tpu_kind_in_the_one_lookup():
    assert "tpu" in kinds()
    assert set(list_presets(kind="tpu")) == {"v5e", "v5p", "v6e"}
    assert get_target("v6e") is v6e and get_target("V5P") is v5p
    assert get_target(kind="tpu") is v6e and DEFAULT_TPU_TARGET == DEFAULT_TARGETS["tpu"] == "v6e"
    assert get_tpu() is v6e and get_tpu(v5e) is v5e
    with pytest.raises(ValueError, match=r"unknown target 'h100'; known tpu targets: v5e, v5p, v6e "
                                         r"\('h100' is a gpu target: select it on the 'cuda' device"):
        get_tpu("h100")


def test_derive_records_the_change_and_validates():
    fast = derive("v6e", hbm_bytes_per_s=3.2e12)
    assert fast.name == "v6e*" and fast.changes == (("hbm_bytes_per_s", 3.2e12),)
    assert "what-if" in fast.source("hbm_bytes_per_s") and v6e.hbm_bytes_per_s == 1638e9
    with pytest.raises(ValueError, match="positive"):
        derive(v6e, mxu_size=0)
    with pytest.raises(ValueError, match="fraction"):
        derive(v6e, max_mxu_efficiency=1.5)
