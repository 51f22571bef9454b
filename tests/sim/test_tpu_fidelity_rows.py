"""The TPU rows of ``make fidelity``: published MaxText throughput as time per sequence, the
full-training op stream behind the prediction, and the row that cannot run says why."""
from __future__ import annotations

import pytest

from benchmarks.fidelity.tpu import LLAMA2_70B, REMAT, full_llama_step, tpu_ns, tpu_rows
from benchmarks.fidelity.workloads import LLAMA_8B, lora_llama_step


def test_full_step_adds_one_weight_gradient_per_linear_and_adamw():
    lora = lora_llama_step(2, seq=64, rank=0)
    full = full_llama_step(2, seq=64)
    extra = full[len(lora):]
    assert [r.name for r in extra].count("aten::mm") == 7 * 2 + 1        # 7 linears per layer + LM head
    assert extra[-1].name == "aten::_fused_adamw_"
    assert tpu_ns(full, "v6e") > tpu_ns(lora, "v6e") > 0


def test_each_chip_updates_only_its_fsdp_shard():
    whole, shard = (full_llama_step(1, seq=64, fsdp=n)[-1] for n in (1, 256))
    assert whole.inputs[0].shape == (4096, 4096) and shard.inputs[0].shape == (16, 4096)    # q_proj
    assert shard.inputs[7].shape == (-(-128256 // 256), 4096)                               # LM head rows


def test_rows_cite_published_throughput_as_time_per_sequence():
    rows = tpu_rows()
    assert [r.predicted_ns is None for r in rows] == [False, False, True]
    llama8, llama70, not_run = rows
    assert llama8.published_ns == pytest.approx(8192 / 7207 * 1e9)
    assert llama70.published_ns == pytest.approx(4096 / 900 * 1e9)
    assert "tiering.md" in llama8.note and "tiering.md" in llama70.note
    assert llama70.predicted_ns > llama8.predicted_ns > 0
    assert not_run.predicted == "not run" and "not run:" in not_run.note
    assert LLAMA2_70B["layers"] == 80 and LLAMA_8B["layers"] == 32


def test_remat_replays_what_the_backward_reads_and_the_policy_dropped():
    plain = [r.name for r in lora_llama_step(1, seq=64, rank=0)]
    mlp_only = [r.name for r in lora_llama_step(1, seq=64, rank=0, recompute=frozenset({"mlp_in"}))]
    extra = list(mlp_only)
    for name in plain:                          # the remat stream is the plain one plus the replay
        extra.remove(name)
    assert sorted(n for n in extra if n != "aten::view") == ["aten::mm", "aten::mm", "aten::mul", "aten::silu"]
    both = lora_llama_step(2, seq=64, rank=0, recompute=REMAT["qkv_proj_offloaded"])
    flash = [r for r in both if r.name == "aten::_scaled_dot_product_flash_attention_for_cpu"]
    assert len(flash) == 4                      # each layer's forward, and its replay
    with pytest.raises(ValueError, match="unknown remat parts"):
        lora_llama_step(1, seq=64, recompute=frozenset({"everything"}))


def test_out_proj_recomputed_only_by_the_policy_that_does_not_offload_it():
    assert "out_proj" in REMAT["qkv_proj_offloaded"]
    assert all("out_proj" not in parts for name, parts in REMAT.items() if name.startswith("custom"))
    slower = tpu_ns(full_llama_step(1, seq=256, recompute=REMAT["qkv_proj_offloaded"]), "v6e")
    assert slower > tpu_ns(full_llama_step(1, seq=256), "v6e")


def test_tpu_rows_carry_a_band_over_the_tpu_assumptions_only():
    llama8 = tpu_rows()[0]
    assert llama8.band.low_ns < llama8.predicted_ns < llama8.band.high_ns
    assert all(e.knob.is_preset for e in llama8.band.effects)
    assert "max_mxu_efficiency" in llama8.note


def test_rows_run_each_recipe_splash_blocks_with_cited_sources():
    from benchmarks.fidelity.tpu import RECIPE_KERNELS

    def kernel(name):
        cfg = RECIPE_KERNELS[name]
        return (cfg.attention_block_q, cfg.attention_block_kv, cfg.attention_block_q_bwd,
                cfg.attention_block_kv_bwd, cfg.attention_fused_backward)

    assert kernel("Llama-3.1-8B") == (2048, 2048, 2048, 2048, True)
    assert kernel("Llama-2-70B") == (1024, 512, 2048, 512, False)      # kv blocks: MaxText's default
    assert "llama3_1_8b_8192" in RECIPE_KERNELS["Llama-3.1-8B"].info("attention_fused_backward").source
    assert "llama2_70b_4096_optimized" in RECIPE_KERNELS["Llama-2-70B"].info("attention_block_q").source
    assert "base.yml" in RECIPE_KERNELS["Llama-2-70B"].info("attention_block_kv").source


def test_rows_run_each_recipe_batch_and_its_gradient_reduction_placement():
    from benchmarks.fidelity.tpu import RECIPE_BATCH, RECIPE_KERNELS

    assert RECIPE_BATCH == {"Llama-3.1-8B": 4, "Llama-2-70B": 2}
    llama8, llama70 = (RECIPE_KERNELS[n] for n in ("Llama-3.1-8B", "Llama-2-70B"))
    assert llama8.gradient_reduction_on_sparsecore and not llama70.gradient_reduction_on_sparsecore
    assert "ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE" in llama8.info("gradient_reduction_on_sparsecore").source
    rows = tpu_rows()
    assert "exposed" in rows[1].note and "overlapped" in rows[0].note
