"""The TPU cases of ``make fidelity``: published MaxText throughput as time per sequence, the
shared Llama's full training step behind the prediction (FSDP shard of AdamW, the recipes'
remat policies), and the row that cannot run says why."""
from __future__ import annotations

import pytest

from benchmarks.fidelity.tpu import REMAT, RECIPE_BATCH, RECIPE_KERNELS, TPU_CASES, full_step_workload, tpu_ns, \
    tpu_rows
from workbench.models import LlamaConfig

TINY = LlamaConfig("tiny", vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
                   num_attention_heads=4, num_key_value_heads=2)


def _records(workload: list) -> list:
    return [args[0] for method, args, kwargs in workload if method == "feed"]


def _names(workload: list) -> list[str]:
    return [r.name for r in _records(workload)]


def test_each_chip_updates_only_its_fsdp_shard_of_every_parameter():
    whole, shard = (next(r for r in _records(full_step_workload(TINY, 64, 1, None, fsdp=n))
                         if r.name == "aten::_fused_adamw_") for n in (1, 256))
    params = len(whole.inputs) // 5          # params, grads, exp_avgs, exp_avg_sqs, steps
    assert params == 3 + 9                   # embedding, final norm, LM head; 7 linears + 2 norms a layer
    assert whole.inputs[0].shape == (512, 256) and shard.inputs[0].shape == (2, 256)     # the embedding


def test_remat_recomputes_what_each_recipe_does_not_save():
    """Per layer: the 70B policy (q/k/v saved) recomputes the output projection as well as
    gate/up; the 8B one (q/k/v/out saved) only gate/up; both rerun attention's forward."""
    def per_layer(remat):
        one, two = (_names(full_step_workload(TINY.replace(num_hidden_layers=n), 64, 1, remat)) for n in (1, 2))
        return {op: two.count(op) - one.count(op) for op in ("aten::mm", "aten::_scaled_dot_product_fused_attention_overrideable")}

    plain = per_layer(None)
    keep_out = per_layer(REMAT["custom: decoder input + q/k/v/out proj offloaded"])
    keep_qkv = per_layer(REMAT["qkv_proj_offloaded"])
    attention = "aten::_scaled_dot_product_fused_attention_overrideable"
    assert plain == {"aten::mm": 21, attention: 1}
    assert keep_out == {"aten::mm": 23, attention: 2}
    assert keep_qkv == {"aten::mm": 24, attention: 2}
    slower = tpu_ns(full_step_workload(TINY, 256, 1, REMAT["qkv_proj_offloaded"]), "v6e")
    assert slower > tpu_ns(full_step_workload(TINY, 256, 1, None), "v6e")


def test_cases_cite_published_throughput_as_time_per_sequence():
    llama8, llama70 = TPU_CASES
    assert llama8.published_ns == pytest.approx(8192 / 7207 * 1e9)
    assert llama70.published_ns == pytest.approx(4096 / 900 * 1e9)
    assert "tiering.md" in llama8.citation and "tiering.md" in llama70.citation
    assert "wb.models.Llama Llama-3.1-8B" in llama8.configuration_text()
    assert "overlapped" in llama8.configuration["gradient reduce-scatter"]
    assert "exposed" in llama70.configuration["gradient reduce-scatter"]


def test_rows_run_each_recipe_splash_blocks_and_batch_with_cited_sources():
    def kernel(name):
        cfg = RECIPE_KERNELS[name]
        return (cfg.attention_block_q, cfg.attention_block_kv, cfg.attention_block_q_bwd,
                cfg.attention_block_kv_bwd, cfg.attention_fused_backward)

    assert kernel("Llama-3.1-8B") == (2048, 2048, 2048, 2048, True)
    assert kernel("Llama-2-70B") == (1024, 512, 2048, 512, False)      # kv blocks: MaxText's default
    assert "llama3_1_8b_8192" in RECIPE_KERNELS["Llama-3.1-8B"].info("attention_fused_backward").source
    assert "base.yml" in RECIPE_KERNELS["Llama-2-70B"].info("attention_block_kv").source
    assert RECIPE_BATCH == {"Llama-3.1-8B": 4, "Llama-2-70B": 2}
    assert "ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE" in \
        RECIPE_KERNELS["Llama-3.1-8B"].info("gradient_reduction_on_sparsecore").source


@pytest.mark.slow
def test_tpu_rows_carry_a_band_over_the_tpu_assumptions_only():
    llama8, llama70, not_run = tpu_rows()
    assert llama70.predicted_ns > llama8.predicted_ns > 0
    assert llama8.band.low_ns < llama8.predicted_ns < llama8.band.high_ns
    assert all(e.knob.is_preset for e in llama8.band.effects)
    assert not_run.predicted == "not run" and "not run:" in not_run.note
