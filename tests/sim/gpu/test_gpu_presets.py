"""GPU presets: cited numbers, lookup and derived variants."""
from __future__ import annotations

import pytest

from backend.sim.gpu import PRESETS, GpuConfig, a100, derive, get_gpu, h100, h200
from backend.sim.spec import ASSUMPTION

MODEL_KNOBS = {"tile_k_bytes", "max_hbm_efficiency", "l2_resident_fraction", "l2_latency_cycles"}


def test_every_hardware_number_names_its_source():
    for f in GpuConfig.spec_fields():
        source = h100.source(f.name)
        assert source, f"{f.name} has no source"
        if f.name in MODEL_KNOBS:
            assert source.startswith(ASSUMPTION) and f.metadata["plausible"], f.name
    assert "hardware.md" in h100.source("bf16_tensor_flops_per_s")
    with pytest.raises(ValueError, match="GpuConfig has no field 'warp_size'"):
        h100.source("warp_size")


@pytest.mark.parametrize("cfg, sms, bf16, hbm_bw", [
    (a100, 108, 312e12, 2039e9), (h100, 132, 989e12, 3350e9), (h200, 132, 989e12, 4800e9)])
def test_presets_carry_the_hardware_table(cfg, sms, bf16, hbm_bw):
    assert (cfg.sm_count, cfg.bf16_tensor_flops_per_s, cfg.hbm_bytes_per_s) == (sms, bf16, hbm_bw)
    # a peak the spec implies: SMs x clock x dense bf16 FLOPs per SM per cycle (A100 2048, H100 4096)
    per_clock = 2048 if cfg is a100 else 4096
    assert cfg.bf16_tensor_flops_per_s == pytest.approx(cfg.sm_count * cfg.clock_hz * per_clock, rel=0.01)


def test_h200_is_an_h100_with_more_and_faster_hbm():
    assert h200.hbm_bytes > h100.hbm_bytes and h200.hbm_bytes_per_s > h100.hbm_bytes_per_s
    assert (h200.sm_count, h200.fp8_tensor_flops_per_s) == (h100.sm_count, h100.fp8_tensor_flops_per_s)
    assert h200.changes == ()      # a preset of its own, not a what-if


def test_get_gpu():
    assert get_gpu("H100") is h100 and get_gpu(a100) is a100 and get_gpu() is h100
    assert set(PRESETS) == {"a100", "h100", "h200"}
    with pytest.raises(ValueError, match="unknown target 'mi300x'; known gpu targets: a100, h100, h200"):
        get_gpu("mi300x")
    with pytest.raises(ValueError, match=r"unknown target 'trn2'; .*\('trn2' is a neuron target: select it on the 'neuron'"):
        get_gpu("trn2")


def test_derive_names_the_variant_and_validates():
    fast = derive("h100", hbm_bytes_per_s=4e12)
    assert fast.name == "h100*" and fast.hbm_bytes_per_s == 4e12
    assert fast.changes == (("hbm_bytes_per_s", 4e12),) and "what-if" in fast.source("hbm_bytes_per_s")
    assert fast.sm_count == h100.sm_count and h100.hbm_bytes_per_s == 3350e9
    assert derive(h100, name="mine", sm_count=1).name == "mine"
    with pytest.raises(ValueError, match="unknown GpuConfig fields"):
        derive(h100, warp_size=32)
    with pytest.raises(ValueError, match="positive"):
        derive(h100, sm_count=0)
    with pytest.raises(ValueError, match="fraction"):
        derive(h100, max_compute_efficiency=1.2)


def test_latency_in_ns_follows_the_clock():
    assert derive(h100, clock_hz=1e9, hbm_latency_cycles=500).hbm_latency_ns == pytest.approx(500.0)
