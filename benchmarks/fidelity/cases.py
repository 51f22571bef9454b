"""Fidelity cases as data: a published result, where it is published, the configuration it ran,
and a builder that reproduces it by running a real ``nn.Module`` on the simulated device.

A :class:`Case` becomes a table row (``Case.row()``): ``build()`` runs the model once and returns
a :class:`Built` -- ``run(target) -> ns`` that re-times what ran on any variant of the target
(the error band sweeps the assumptions with it), the nominal target, and what the run did --
so nothing about the prediction is written by hand. Cases that share one run (the same torch
program eagerly and compiled) share a cached builder.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache



from backend.sim.sensitivity import format_ns
from benchmarks.fidelity import models

__all__ = ["Case", "Built", "TRAINING_CASES", "LORA_PUBLISHED_NS"]


@dataclass(frozen=True)
class Built:
    run: Callable[[object], float]          # target -> predicted ns
    target: object
    how: str                                # what ran, for the row's note


@dataclass(frozen=True)
class Case:
    workload: str                           # the row's name
    published_ns: float
    citation: str
    configuration: Mapping[str, object]     # the published run's settings; "ASSUMPTION" marks ours
    build: Callable[[], Built] = field(compare=False, repr=False)

    def configuration_text(self) -> str:
        return ", ".join(f"{key} {value}" for key, value in self.configuration.items())

    def row(self):
        from benchmarks.fidelity.table import _timed

        built = self.build()
        return _timed(self.workload, built.run, built.target, self.published_ns,
                      f"{self.citation}; configuration: {self.configuration_text()}; {built.how}")


@cache
def _runs(name: str) -> models.StepRuns:
    model = {"bert": models.bert_pretraining, "lora": models.lora_llama}[name]()
    return models.step_runs(model, "trn1")


def _eager(name: str, what: str) -> Callable[[], Built]:
    def build() -> Built:
        runs = _runs(name)
        return Built(runs.eager, runs.target, f"{what} run eagerly on neuron, fwd+bwd and fused AdamW step, "
                     f"timing-only tensors, extrapolated from 1 and 2 layers ({runs.eager_ops} ops at 2 layers)")
    return build


def _compiled(name: str, what: str, published_ns: float) -> Callable[[], Built]:
    def build() -> Built:
        runs = _runs(name)
        breaks = "; ".join(f"{reason.splitlines()[0]} x{n}" for reason, n in runs.graph_breaks.items()) or "none"
        eager_ns = runs.eager(runs.target)
        return Built(runs.compiled, runs.target,
                     f"torch.compile(backend='neuron') of {what}, fwd+bwd and fused AdamW step, timing-only "
                     f"tensors, extrapolated from 1 and 2 layers ({runs.compiled_ops} kernels vs {runs.eager_ops} "
                     f"eager ops at 2 layers); the same torch program eagerly: {format_ns(eager_ns)} "
                     f"({eager_ns / published_ns:.3f}); graph breaks: {breaks}")
    return build


_BERT_CITATION = ("Neuron trn1 training performance table, training_data_encoder.csv (SDK 2.28): 3,826.6 seq/s "
                  "on 1x trn1.32xlarge, DP over 32 cores; published = 16 / (3826.6 / 32) per step")
_BERT_CONFIGURATION = {"model": "HF BertForPreTraining, bert-large-uncased config (24 layers, hidden 1024, dropout 0.1)",
                       "seq": 128, "micro-batch": 16, "dtype": "bf16 (+ stochastic rounding)", "hardware": "one trn1 NeuronCore",
                       "loss": "MLM over every position + NSP", "optimizer": "AdamW (fused)",
                       "data-parallel allreduce": "excluded (one core)"}
_BERT = "HF BertForPreTraining from bert-large's config"
BERT_PUBLISHED_NS = 133.8e6
# Third party: 2,952 tokens/s on a 2-core trn1.2xlarge at seq 2048 -> one core's step time.
LORA_PUBLISHED_NS = 2 * 2048 / 2952 * 1e9
_LORA_CITATION = ("github.com/alpharomercoma/torchneuronx README (third party): 2,952 tok/s on a 2-core trn1.2xlarge, reported 68.3% MFU; published = 2 cores x "
                  "2048 tokens / 2,952 tok/s")
_LORA_CONFIGURATION = {"model": "wb.models.Llama Llama-3.1-8B", "adapters": "LoRA r16 on q_proj, v_proj (peft's form)",
                       "seq": 2048, "micro-batch": "1 (ASSUMPTION: not stated)", "dtype": "bf16",
                       "hardware": "one trn1 NeuronCore", "optimizer": "AdamW (fused) over the adapters"}
_LORA = "the shared Llama-3.1-8B with peft-style LoRA"

TRAINING_CASES = (
    Case("BERT-large pretraining step per core (s128 mb16 bf16, trn1)", BERT_PUBLISHED_NS, _BERT_CITATION,
         {**_BERT_CONFIGURATION, "mode": "eager"}, _eager("bert", _BERT)),
    Case("BERT-large pretraining step per core, compiled (trn1)", BERT_PUBLISHED_NS, _BERT_CITATION,
         {**_BERT_CONFIGURATION, "mode": "torch.compile"}, _compiled("bert", _BERT, BERT_PUBLISHED_NS)),
    Case("LoRA fine-tune Llama-3.1-8B step per core (s2048 mb1 bf16, trn1)", LORA_PUBLISHED_NS, _LORA_CITATION,
         {**_LORA_CONFIGURATION, "mode": "eager"}, _eager("lora", _LORA)),
    Case("LoRA fine-tune Llama-3.1-8B step per core, compiled (trn1)", LORA_PUBLISHED_NS, _LORA_CITATION,
         {**_LORA_CONFIGURATION, "mode": "torch.compile"}, _compiled("lora", _LORA, LORA_PUBLISHED_NS)),
)

