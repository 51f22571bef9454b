import dataclasses

import pytest

from backend.sim.presets import GiB, MiB, NeuronConfig, TARGETS, derive, get_target, source_of


def test_known_targets_and_default():
    assert set(TARGETS) == {"trn1", "trn2", "trn3"}
    assert get_target().name == "trn2"
    assert get_target("TRN1").generation == "NC-v2"
    cfg = get_target("trn3")
    assert get_target(cfg) is cfg


def test_unknown_target_lists_known():
    with pytest.raises(ValueError, match="trn1, trn2, trn3"):
        get_target("tpu")


@pytest.mark.parametrize("name", ["trn1", "trn2", "trn3"])
def test_every_number_names_its_source(name):
    cfg = get_target(name)
    for f in dataclasses.fields(NeuronConfig):
        if f.name == "name":
            continue
        src = source_of(cfg, f.name)
        assert src, f"{name}.{f.name} has no source"
        assert "nki" in src or "about-neuron" in src or "hardware.md" in src or src.startswith("ASSUMPTION"), src


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
    assert big.sbuf_bytes == 48 * MiB and big.name != "trn2"
    assert big.tensor_clock_hz == get_target("trn2").tensor_clock_hz
    assert "what-if" in source_of(big, "sbuf_bytes")
    fast = derive("trn1", name="trn1-2xhbm", hbm_bytes_per_s=2 * get_target("trn1").hbm_bytes_per_s)
    assert fast.name == "trn1-2xhbm" and fast.generation == "NC-v2"
    with pytest.raises(ValueError, match="unknown NeuronConfig fields"):
        derive("trn2", sbuf_megabytes=1)
