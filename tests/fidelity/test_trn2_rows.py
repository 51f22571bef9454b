"""The trn2 fidelity cases (``benchmarks/fidelity/trn2.py``): each carries its published figures,
source and configuration, matches the checkpoint it names and the sources doc, and its builder
constructs; the attention stand-in and laid-out weights its notes measure compute what the
module computes. Running the rows is slow."""
import re
from pathlib import Path

import pytest
import torch

from benchmarks.fidelity import trn2
from workbench.serving.model_shapes import build_timing_only, model_shape, shard_config

SOURCES = Path(__file__).resolve().parents[2] / "docs" / "hardware-sources.md"


@pytest.mark.parametrize("case", trn2.CASES, ids=lambda c: c.name)
def test_each_case_carries_its_published_figures_source_and_configuration(case):
    assert case.ttft_ms > 0 and case.tpot_ms > 0
    assert "aws-neuron/aws-neuron-sdk" in case.source and re.search(r"\b[0-9a-f]{8}\b", case.source)
    assert f"TP{case.tp}" in case.configuration and f"batch {case.batch}" in case.configuration
    assert case.target.startswith("trn2") and "trn2" in case.name


@pytest.mark.parametrize("case", trn2.CASES, ids=lambda c: c.name)
def test_each_case_is_the_checkpoint_it_names(case):
    billions = float(re.search(r"-(\d+)B\b", case.name).group(1))
    assert model_shape(trn2.llama_config(case)).num_params / 1e9 == pytest.approx(billions, rel=0.02)


@pytest.mark.parametrize("case", trn2.CASES, ids=lambda c: c.name)
def test_each_case_is_listed_in_the_sources_doc(case):
    model = case.name.split()[0]
    rows = [line for line in SOURCES.read_text().splitlines() if line.startswith(f"| {model}")]
    assert any(f"{case.ttft_ms:,g} ms" in row and f"{case.tpot_ms:,g} ms" in row for row in rows), \
        f"docs/hardware-sources.md has no row for {model} with TTFT {case.ttft_ms} and TPOT {case.tpot_ms}"


@pytest.mark.parametrize("case", trn2.CASES, ids=lambda c: c.name)
def test_each_case_builds_its_tensor_parallel_shard(case, neuron):
    model = build_timing_only(shard_config(trn2.llama_config(case), case.tp, 1))
    attention = model.model.layers[0].self_attn
    assert attention.q_proj.out_features * case.tp == case.sizes["num_attention_heads"] * attention.head_dim
    assert model.model.layers[0].mlp.gate_proj.out_features * case.tp == case.sizes["intermediate_size"]


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa")
    return LlamaForCausalLM(config).eval()


def test_the_fused_attention_stand_in_computes_hugging_face_attention():
    from transformers import AttentionInterface
    model, ids = _tiny_llama(), torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits
        AttentionInterface.register(trn2._FUSED, trn2._fused_attention)
        model.config._attn_implementation = trn2._FUSED
        torch.testing.assert_close(model(ids).logits, expected)


def test_laid_out_weights_store_each_linear_in_out_and_compute_the_same():
    model, ids = _tiny_llama(), torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits
        shapes = {name: m.weight.shape for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        trn2._lay_out_weights(model)
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.Linear):
                assert m.weight.shape == shapes[name] and m.weight.t().is_contiguous()
        torch.testing.assert_close(model(ids).logits, expected)


@pytest.mark.slow
def test_the_rows_run_and_explain_a_ratio_outside_the_range():
    from benchmarks.fidelity.report import IN_RANGE
    rows = trn2.trn2_rows()
    assert len(rows) == 2 * len(trn2.CASES)
    for row in rows:
        assert row.predicted_ns > 0 and row.published_ns > 0
        if not IN_RANGE[0] <= row.predicted_ns / row.published_ns <= IN_RANGE[1]:
            assert "measured on the same shard" in row.note, row.workload
