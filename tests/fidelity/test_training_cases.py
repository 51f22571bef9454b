"""The trn1 training cases are data (published value, citation, configuration) whose builders
run real modules: HF's BertForPreTraining and the shared ``wb.models.Llama`` with LoRA, eager
and compiled from the same torch program."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from benchmarks.fidelity import models
from benchmarks.fidelity.cases import LORA_PUBLISHED_NS, TRAINING_CASES
from workbench.models import Llama, LlamaConfig, LoraLinear

TINY = LlamaConfig("tiny", vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
                   num_attention_heads=4, num_key_value_heads=2)


def test_cases_are_published_values_with_citations_and_configurations():
    bert_eager, bert_compiled, lora_eager, lora_compiled = TRAINING_CASES
    assert bert_eager.published_ns == bert_compiled.published_ns == pytest.approx(16 / (3826.6 / 32) * 1e9, rel=1e-3)
    assert lora_eager.published_ns == lora_compiled.published_ns == LORA_PUBLISHED_NS
    assert "training_data_encoder.csv" in bert_eager.citation and "2,952 tok/s" in lora_eager.citation
    assert lora_eager.configuration["mode"] == "eager" and lora_compiled.configuration["mode"] == "torch.compile"
    assert "wb.models.Llama Llama-3.1-8B" in lora_eager.configuration_text()
    assert "ASSUMPTION" in lora_eager.configuration["micro-batch"]


def test_models_are_the_upstream_modules():
    with torch.device("meta"):
        lora = models.lora_llama().build(1)
        bert = models.bert_pretraining().build(1)
    assert isinstance(lora, Llama) and lora.config.name == "Llama-3.1-8B"
    attention = lora.model.layers[0].self_attn
    assert isinstance(attention.q_proj, LoraLinear) and isinstance(attention.v_proj, LoraLinear)
    assert not isinstance(attention.k_proj, LoraLinear) and attention.q_proj.lora_A.out_features == 16
    assert {n.split(".")[-2] for n, p in lora.named_parameters() if p.requires_grad} == {"lora_A", "lora_B"}
    assert type(bert).__name__ == "BertForPreTraining" and bert.config.hidden_size == 1024 and bert.training


@pytest.mark.slow
def test_eager_and_compiled_rows_time_the_same_module():
    runs = models.step_runs(models.lora_llama(TINY, seq=64), "trn1")
    assert 0 < runs.compiled_ops < runs.eager_ops
    assert runs.eager(runs.target) > 0 and runs.compiled(runs.target) > 0


def test_the_timed_step_starts_from_zeroed_gradients_as_a_training_loop_does():
    """``optimizer.zero_grad()`` sets gradients to None, so the timed backward writes each weight's
    gradient once; without it every step would add into the last step's (an extra read-modify-write
    of every gradient that no training loop pays)."""
    model = nn.Sequential(nn.Linear(64, 64, bias=False), nn.ReLU(), nn.Linear(64, 64, bias=False)).to("neuron")
    batch = {"x": torch.randn(8, 64, device="neuron")}
    workload, _, _ = models.training_step_workload(model, batch, lambda m, b: m(b["x"]).sum(), compiled=False,
                                                   target="trn1")
    accumulations = [r for r in workload if r.name in ("aten::add_", "aten::add") and
                     any(tuple(t.shape) == (64, 64) for t in r.inputs)]
    assert accumulations == []
    assert sum(r.name == "aten::mm" for r in workload) == 5      # 2 forward, 3 backward (no input grad)
