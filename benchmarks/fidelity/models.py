"""The BERT-large and LoRA Llama training steps as torch programs, eager or ``torch.compile``d.

The op-stream rows (``workloads``) describe the eager aten stream directly; the published
figures come from Neuron's whole-graph (torch-neuronx / XLA) execution. These modules are the
same layer stacks as ``nn.Module``\\ s, so one training step -- forward, backward and a fused
AdamW step, as the eager streams do -- can run through ``torch.compile(backend="neuron")`` as
well as eagerly, on data-free tensors (``torch.neuron.timing_only()``) to keep host cost low.

Attention is the fused flash-attention op (``_scaled_dot_product_flash_attention_for_cpu``), as
in the eager streams and Neuron's attention kernels: ``F.scaled_dot_product_attention`` on the
``neuron`` device takes PyTorch's math path (fp32 upcast, explicit softmax), which neither the
streams nor Neuron's compiler use. The step is timed on its second call: the first pays what a
compiled graph does once (Dynamo tracing, parameter relayouts, hoisted kernels).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from backend.sim.presets import NeuronConfig
from benchmarks.fidelity.workloads import per_layer_replay
from workbench.session import profile            # also makes the ``neuron`` device (torch.neuron)

__all__ = ["BertEncoder", "LoraLlama", "training_step_workload", "StepRuns", "step_runs"]

_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _attention(q, k, v, causal: bool):
    return _FLASH(q, k, v, is_causal=causal)[0]


class _BertBlock(nn.Module):
    """The eager stream's encoder block: LN -> fused QKV -> attention -> proj, LN -> GELU MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln2, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(_attention(q, k, v, causal=False).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class BertEncoder(nn.Module):
    """BERT with its MLM head over every token (decoder tied to the word embeddings)."""

    def __init__(self, layers: int, d: int = 1024, heads: int = 16, vocab: int = 30522, positions: int = 512):
        super().__init__()
        self.wte, self.wpe, self.wtt = nn.Embedding(vocab, d), nn.Embedding(positions, d), nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList(_BertBlock(d, heads) for _ in range(layers))
        self.dense, self.ln_head = nn.Linear(d, d), nn.LayerNorm(d)
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids):
        x = self.ln(self.wte(ids) + self.wpe.weight[:ids.shape[1]] + self.wtt.weight[0])
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_head(F.gelu(self.dense(x))), self.wte.weight, self.bias)


class _RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class _LoraLinear(nn.Module):
    """A frozen bias-free linear with an optional rank-``rank`` adapter ``x A^T B^T``."""

    def __init__(self, d_in: int, d_out: int, rank: int = 0):
        super().__init__()
        self.base = nn.Linear(d_in, d_out, bias=False).requires_grad_(False)
        self.a = nn.Linear(d_in, rank, bias=False) if rank else None
        self.b = nn.Linear(rank, d_out, bias=False) if rank else None

    def forward(self, x):
        y = self.base(x)
        return y + self.b(self.a(x)) if self.a is not None else y


class _LlamaBlock(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, ffn: int, rank: int):
        super().__init__()
        self.heads, self.kv_heads, hd = heads, kv_heads, d // heads
        self.norm1, self.norm2 = _RMSNorm(d).requires_grad_(False), _RMSNorm(d).requires_grad_(False)
        self.q, self.k = _LoraLinear(d, d, rank), _LoraLinear(d, kv_heads * hd)
        self.v, self.o = _LoraLinear(d, kv_heads * hd, rank), _LoraLinear(d, d)
        self.gate, self.up, self.down = _LoraLinear(d, ffn), _LoraLinear(d, ffn), _LoraLinear(ffn, d)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        hd, groups = d // self.heads, self.heads // self.kv_heads
        h = self.norm1(x)
        q = _rope(self.q(h).view(b, t, self.heads, hd).transpose(1, 2), cos, sin)
        k = _rope(self.k(h).view(b, t, self.kv_heads, hd).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, self.kv_heads, hd).transpose(1, 2)
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        x = x + self.o(_attention(q, k, v, causal=True).transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LoraLlama(nn.Module):
    """Llama-3.1-8B-shaped blocks with rank-16 q/v adapters; frozen base, untied LM head."""

    def __init__(self, layers: int, d: int = 4096, heads: int = 32, kv_heads: int = 8, ffn: int = 14336,
                 vocab: int = 128256, rank: int = 16):
        super().__init__()
        self.hd = d // heads
        self.embed = nn.Embedding(vocab, d).requires_grad_(False)
        self.blocks = nn.ModuleList(_LlamaBlock(d, heads, kv_heads, ffn, rank) for _ in range(layers))
        self.norm = _RMSNorm(d).requires_grad_(False)
        self.head = nn.Linear(d, vocab, bias=False).requires_grad_(False)
        # RoPE tables as buffers: the compiled graph reads them as constants
        self.register_buffer("cos", torch.ones(1, 1, 1, self.hd), persistent=False)
        self.register_buffer("sin", torch.zeros(1, 1, 1, self.hd), persistent=False)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(self.norm(x))


def training_step_workload(model: nn.Module, ids: torch.Tensor, compiled: bool, target: str):
    """(workload, target, graph breaks) of one steady-state step: forward, cross-entropy,
    backward, fused AdamW over the trainable parameters; ``compiled`` runs the step's two parts
    (forward+backward, optimizer) through ``torch.compile(backend="neuron")``."""
    from torch._dynamo.utils import counters

    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=True)

    def forward_backward(ids):
        logits = model(ids)
        F.cross_entropy(logits.view(-1, logits.shape[-1]), ids.view(-1)).backward()

    if compiled:
        torch._dynamo.reset()
        counters.clear()
        forward_backward = torch.compile(forward_backward, backend="neuron")
        step = torch.compile(optimizer.step, backend="neuron")
    else:
        step = optimizer.step
    forward_backward(ids)
    step()
    with profile(target=target, source=False) as prof:
        forward_backward(ids)
        step()
    breaks = dict(counters["graph_break"]) if compiled else {}
    return prof.workload, prof.workload_target, breaks


@dataclass(frozen=True)
class StepRuns:
    """A layer stack's step, eager and compiled, extrapolated to ``layers`` from 1 and 2 layers."""

    eager: Callable[[NeuronConfig], float]
    compiled: Callable[[NeuronConfig], float]
    target: NeuronConfig
    compiled_ops: int                  # kernels in the compiled 2-layer step
    eager_ops: int
    graph_breaks: dict                 # Dynamo's reason -> count, over both compiled depths


def step_runs(build: Callable[[int], nn.Module], ids: Callable[[], torch.Tensor], layers: int,
              target: str) -> StepRuns:
    """Build ``build(1)`` and ``build(2)`` data-free in bf16 on ``neuron`` and keep one training
    step of each, eager and compiled."""
    kept: dict = {}
    breaks: dict = {}
    for compiled in (False, True):
        for depth in (1, 2):
            with torch.device("neuron"), torch.neuron.timing_only():
                model, tokens = build(depth).to(torch.bfloat16), ids()
            workload, kept_target, graph_breaks = training_step_workload(model, tokens, compiled, target)
            kept[compiled, depth] = workload
            for reason, count in graph_breaks.items():
                breaks[reason] = breaks.get(reason, 0) + count
    return StepRuns(per_layer_replay(kept[False, 1], kept[False, 2], layers),
                    per_layer_replay(kept[True, 1], kept[True, 2], layers), kept_target,
                    len(kept[True, 2]), len(kept[False, 2]), breaks)
