"""Training steps of real ``nn.Module``\\ s, eager or ``torch.compile``\\ d, timed on data-free tensors.

The fidelity cases' models: Hugging Face's ``BertForPreTraining`` built from bert-large's
configuration, and the shared ``wb.models.Llama`` (Llama-3.1-8B with rank-16 LoRA adapters on
q and v, as peft attaches them). One training step -- forward, loss, backward, a fused AdamW
step over the trainable parameters -- runs eagerly and through ``torch.compile(backend="neuron")``
on timing-only tensors (``torch.neuron.timing_only()``). The step is timed on its second call:
the first pays what a compiled graph does once (Dynamo tracing, parameter relayouts, hoisted
kernels). Identical layers run back to back, so a deep model's step is extrapolated from one and
two layers: ``t(L) = t(1) + (L - 1) * (t(2) - t(1))``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from backend.lowering.timeline import replay
from backend.sim.presets import NeuronConfig
from workbench.models import Llama, LlamaConfig, Lora, llama_config
from workbench.session import profile            # also makes the ``neuron`` device (torch.neuron)

__all__ = ["BERT_LARGE", "bert_pretraining", "lora_llama", "training_step_workload", "StepRuns", "step_runs",
           "per_layer_replay", "TrainingModel"]

# bert-large-uncased's config.json (huggingface.co/google-bert/bert-large-uncased): the rest are
# BertConfig's defaults, which it shares (GELU, dropout 0.1, 512 positions, 2 token types).
BERT_LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                  vocab_size=30522)


@dataclass(frozen=True)
class TrainingModel:
    """How to build a model of ``layers`` layers and take its loss on one batch."""

    build: Callable[[int], nn.Module]
    batch: Callable[[], dict]                       # the step's inputs, made on the device
    loss: Callable[[nn.Module, dict], torch.Tensor]
    layers: int                                     # of the published model


def _bert_loss(model, batch):
    return model(**batch).loss


def bert_pretraining(micro_batch: int = 16, seq: int = 128) -> TrainingModel:
    """Hugging Face's ``BertForPreTraining`` (MLM over every position, NSP), as the Neuron BERT
    pretraining tutorial trains it, in train mode (dropout on), bf16 parameters."""
    from transformers import BertConfig, BertForPreTraining

    def build(layers: int) -> nn.Module:
        config = BertConfig(**{**BERT_LARGE, "num_hidden_layers": layers})
        return BertForPreTraining(config).to(torch.bfloat16).train()

    def batch() -> dict:
        vocab = BERT_LARGE["vocab_size"]
        return {"input_ids": torch.randint(0, vocab, (micro_batch, seq)),
                "token_type_ids": torch.zeros(micro_batch, seq, dtype=torch.long),
                "labels": torch.randint(0, vocab, (micro_batch, seq)),
                "next_sentence_label": torch.randint(0, 2, (micro_batch,))}

    return TrainingModel(build, batch, _bert_loss, BERT_LARGE["num_hidden_layers"])


def _lm_loss(model, batch):
    logits = model(batch["input_ids"])
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), batch["input_ids"].view(-1))


def lora_llama(config: LlamaConfig | str = "Llama-3.1-8B", lora: Lora = Lora(r=16, lora_alpha=32),
               micro_batch: int = 1, seq: int = 2048) -> TrainingModel:
    """The shared Llama (a named configuration or a ``LlamaConfig``) with LoRA adapters (base
    frozen), bf16."""
    config = llama_config(config) if isinstance(config, str) else config

    def build(layers: int) -> nn.Module:
        return Llama(config.replace(num_hidden_layers=layers), lora=lora, dtype=torch.bfloat16)

    def batch() -> dict:
        return {"input_ids": torch.randint(0, config.vocab_size, (micro_batch, seq))}

    return TrainingModel(build, batch, _lm_loss, config.num_hidden_layers)


def training_step_workload(model: nn.Module, batch: dict, loss: Callable, compiled: bool, target: str):
    """(workload, target, graph breaks) of one steady-state step as a training loop writes it:
    ``optimizer.zero_grad()`` (gradients set to None, PyTorch's default, so backward writes fresh
    gradients instead of adding into old ones), forward, loss, backward, fused AdamW over the
    trainable parameters; ``compiled`` runs the step's two parts (forward+backward, optimizer)
    through ``torch.compile(backend="neuron")``."""
    from torch._dynamo.utils import counters

    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=True)

    def forward_backward(batch):
        loss(model, batch).backward()

    if compiled:
        torch._dynamo.reset()
        counters.clear()
        forward_backward = torch.compile(forward_backward, backend="neuron")
        step = torch.compile(optimizer.step, backend="neuron")
    else:
        step = optimizer.step
    optimizer.zero_grad()
    forward_backward(batch)
    step()
    with profile(target=target, source=False) as prof:
        optimizer.zero_grad()
        forward_backward(batch)
        step()
    breaks = dict(counters["graph_break"]) if compiled else {}
    return prof.workload, prof.workload_target, breaks


def per_layer_replay(one: list, two: list, layers: int,
                     cost: Callable[[list, object], float] = replay) -> Callable[[NeuronConfig], float]:
    """``run(target) -> ns`` of ``layers`` layers from kept 1- and 2-layer workloads, each timed
    by ``cost(workload, target)`` (a NeuronCore replay by default)."""

    def run(target: NeuronConfig) -> float:
        t1 = cost(one, target)
        return t1 + (layers - 1) * (cost(two, target) - t1)

    return run


@dataclass(frozen=True)
class StepRuns:
    """A layer stack's step, eager and compiled, extrapolated to ``layers`` from 1 and 2 layers."""

    eager: Callable[[NeuronConfig], float]
    compiled: Callable[[NeuronConfig], float]
    target: NeuronConfig
    compiled_ops: int                  # kernels in the compiled 2-layer step
    eager_ops: int
    graph_breaks: dict                 # Dynamo's reason -> count, over both compiled depths


def step_runs(model: TrainingModel, target: str) -> StepRuns:
    """Build ``model`` at 1 and 2 layers data-free on ``neuron`` and keep one training step of
    each, eager and compiled."""
    kept: dict = {}
    breaks: dict = {}
    for compiled in (False, True):
        for depth in (1, 2):
            with torch.device("neuron"), torch.neuron.timing_only():
                net, batch = model.build(depth), model.batch()
            workload, kept_target, graph_breaks = training_step_workload(net, batch, model.loss, compiled, target)
            kept[compiled, depth] = workload
            for reason, count in graph_breaks.items():
                breaks[reason] = breaks.get(reason, 0) + count
    return StepRuns(per_layer_replay(kept[False, 1], kept[False, 2], model.layers),
                    per_layer_replay(kept[True, 1], kept[True, 2], model.layers), kept_target,
                    len(kept[True, 2]), len(kept[False, 2]), breaks)
