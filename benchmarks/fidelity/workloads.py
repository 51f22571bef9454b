"""Whole-workload fidelity cases: op streams and torch programs behind the published results.

- BERT-large phase-1 pretraining step per core (seq 128, micro-batch 16, bf16): an eager aten
  op stream (``benchmarks.op_streams`` blocks with bidirectional attention), the MLM head over
  every token, backward, and one fused AdamW over every parameter. The allreduce of data
  parallelism is excluded (one core); the NSP head (a [16, 2] linear) is left out.
- A LoRA fine-tuning step of Llama-3.1-8B per core (seq 2048, micro-batch 1, bf16): RMSNorm,
  RoPE, grouped-query causal attention, SwiGLU; base weights frozen (backward computes input
  gradients only), rank-16 adapters on the q and v projections, AdamW over the adapters. The
  untied LM head's weight gradient is costed as well (about 1% of the step).
- The Mamba layer (batch 1, seq 512, channels 256, state 16) as the NKI tutorial's PyTorch
  reference writes it: exp/multiply broadcasts, a sequential scan over the 512 positions, a
  sum over the state axis -- run with torch on the ``neuron`` device, eagerly (unfused).

Identical layers run back to back, so a deep model's step is extrapolated from one and two
layers: ``t(L) = t(1) + (L - 1) * (t(2) - t(1))`` -- the difference holds a layer and its
boundary with the next exactly as in the full stream, and the band uses the same formula.
"""
from __future__ import annotations

from collections.abc import Callable

from backend.lowering.timeline import replay
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.presets import NeuronConfig
from benchmarks.op_streams import OpStream, block_backward, block_forward, lm_loss_backward

__all__ = ["bert_pretraining_step", "lora_llama_step", "REMAT_PARTS", "per_layer_run", "per_layer_replay", "mamba_workload", "BERT_LARGE",
           "LLAMA_8B"]

BERT_LARGE = {"layers": 24, "d": 1024, "heads": 16, "vocab": 30522, "positions": 512}
LLAMA_8B = {"layers": 32, "d": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 128256}


def _bert_params(layers: int, d: int, vocab: int, positions: int) -> list[tuple[int, ...]]:
    """Parameter shapes: embeddings (+ LN), per layer QKV/proj/FFN with biases and two LNs, MLM head."""
    shapes = [(vocab, d), (positions, d), (2, d), (d,), (d,)]
    for _ in range(layers):
        shapes += [(3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,), (d,), (d,)]
    return shapes + [(d, d), (d,), (d,), (d,), (vocab,)]


def bert_pretraining_step(layers: int, batch: int = 16, seq: int = 128, d: int = 1024, heads: int = 16,
                          vocab: int = 30522, positions: int = 512, dtype: str = "bfloat16") -> list[OpRecord]:
    """One BERT pretraining step (MLM) forward + backward + AdamW, as eager aten ops."""
    s = OpStream(dtype)
    tokens = batch * seq
    ids = s.t(batch, seq, dtype="int64")
    wte = s.t(vocab, d)
    emb = s.op("aten::embedding", [wte, ids], [s.t(batch, seq, d)])
    emb = s.op("aten::add", [emb, s.t(seq, d)], [s.t(batch, seq, d)], alpha=1)          # positions
    s.op("aten::add", [emb, s.t(batch, seq, d)], [s.t(batch, seq, d)], alpha=1)         # token types
    s.layer_norm(s.t(tokens, d), d)
    saved = [block_forward(s, batch, seq, d, heads, causal=False) for _ in range(layers)]
    dense = s.linear(s.t(tokens, d), d, d)
    act = s.op("aten::gelu", [dense], [s.t(tokens, d)], approximate="none")
    h = s.layer_norm(act, d)
    logits = s.op("aten::addmm", [s.t(vocab), h, s.view(wte, d, vocab, strides=(1, d))], [s.t(tokens, vocab)],
                  beta=1, alpha=1)
    g = lm_loss_backward(s, logits, h, wte)
    s.op("aten::sum", [g], [s.t(vocab)], dim=[0], keepdim=True)
    g = s.layer_norm_backward(s.t(tokens, d), d)
    g = s.op("aten::gelu_backward", [g, dense], [s.t(tokens, d)], approximate="none")
    s.linear_backward(g, s.t(tokens, d), d, d)
    for block in reversed(saved):
        block_backward(s, block, batch, seq, d, heads)
    s.layer_norm_backward(s.t(tokens, d), d)
    s.op("aten::embedding_dense_backward", [s.t(batch, seq, d), ids], [s.t(vocab, d)],
         num_weights=vocab, padding_idx=-1, scale_grad_by_freq=False)
    params = [s.t(*shape) for shape in _bert_params(layers, d, vocab, positions)]
    steps = [TensorDesc((), "float32") for _ in params]
    s.op("aten::_fused_adamw_", [*params, *params, *params, *params, *steps], [], lr=1e-4, beta1=0.9, beta2=0.999,
         weight_decay=0.01, eps=1e-6, amsgrad=False, maximize=False)
    return s.records


def _rms_norm(s: OpStream, x: TensorDesc) -> TensorDesc:
    tokens, d = x.shape
    sq = s.op("aten::pow", [x], [s.t(tokens, d)], exponent=2)
    ms = s.op("aten::mean", [sq], [s.t(tokens, 1)], dim=[-1], keepdim=True)
    r = s.op("aten::rsqrt", [s.op("aten::add", [ms], [s.t(tokens, 1)], other=1e-5)], [s.t(tokens, 1)])
    return s.op("aten::mul", [s.op("aten::mul", [x, r], [s.t(tokens, d)]), s.t(d)], [s.t(tokens, d)])


def _rope(s: OpStream, x: TensorDesc) -> TensorDesc:
    """x * cos + rotate_half(x) * sin."""
    half = [s.t(*x.shape[:-1], x.shape[-1] // 2)]
    rotated = s.op("aten::cat", [s.op("aten::neg", half, half), *half], [s.t(*x.shape)], dim=-1)
    return s.op("aten::add", [s.op("aten::mul", [x, s.t(*x.shape)], [s.t(*x.shape)]),
                              s.op("aten::mul", [rotated, s.t(*x.shape)], [s.t(*x.shape)])], [s.t(*x.shape)], alpha=1)


def _frozen_linear(s: OpStream, x: TensorDesc, d_in: int, d_out: int, rank: int = 0) -> TensorDesc:
    """x @ W.t() (bias-free), plus a LoRA adapter x @ A.t() @ B.t() when ``rank``."""
    y = s.op("aten::mm", [x, s.view(s.t(d_out, d_in), d_in, d_out, strides=(1, d_in))], [s.t(x.shape[0], d_out)])
    if rank:
        a = s.op("aten::mm", [x, s.view(s.t(rank, d_in), d_in, rank, strides=(1, d_in))], [s.t(x.shape[0], rank)])
        b = s.op("aten::mm", [a, s.view(s.t(d_out, rank), rank, d_out, strides=(1, rank))], [s.t(x.shape[0], d_out)])
        y = s.op("aten::add", [y, b], [s.t(x.shape[0], d_out)], alpha=1)
    return y


def _frozen_linear_backward(s: OpStream, g: TensorDesc, x: TensorDesc, d_in: int, d_out: int, rank: int = 0) -> None:
    """Input gradient through W; with an adapter, its two weight gradients and input gradient too."""
    tokens = g.shape[0]
    s.op("aten::mm", [g, s.t(d_out, d_in)], [s.t(tokens, d_in)])
    if rank:
        ga = s.op("aten::mm", [g, s.t(d_out, rank)], [s.t(tokens, rank)])
        s.op("aten::mm", [s.view(g, d_out, tokens, strides=(1, d_out)), s.t(tokens, rank)], [s.t(d_out, rank)])
        s.op("aten::mm", [s.view(ga, rank, tokens, strides=(1, rank)), x], [s.t(rank, d_in)])
        s.op("aten::mm", [ga, s.t(rank, d_in)], [s.t(tokens, d_in)])


# What a rematerialisation policy recomputes in each layer's backward (what the backward reads
# and the policy did not keep): norm outputs, RoPE, the attention forward (flash attention keeps
# no scores), the output projection (for the second norm's input), the MLP's gate/up/act.
REMAT_PARTS = frozenset({"norms", "rope", "attention", "out_proj", "mlp_in"})


def _flash_attention(s: OpStream, qh: TensorDesc, kh: TensorDesc) -> TensorDesc:
    batch, heads, seq, hd = qh.shape
    return s.op("aten::_scaled_dot_product_flash_attention_for_cpu", [qh, kh, kh],
                [s.t(batch, heads, seq, hd), s.t(batch, heads, seq)], is_causal=True, dropout_p=0.0)


def _mlp_in(s: OpStream, h2: TensorDesc, d: int, ffn: int) -> tuple[TensorDesc, TensorDesc, TensorDesc]:
    """gate, up and silu(gate) * up."""
    tokens = h2.shape[0]
    gate, up = _frozen_linear(s, h2, d, ffn), _frozen_linear(s, h2, d, ffn)
    return gate, up, s.op("aten::mul", [s.op("aten::silu", [gate], [s.t(tokens, ffn)]), up], [s.t(tokens, ffn)])


def _rematerialise(s: OpStream, parts: frozenset[str], qh: TensorDesc, kh: TensorDesc, merged: TensorDesc,
                   rank: int, d: int, kv_width: int, ffn: int) -> None:
    """Replay the forward ops of one layer that the backward reads and ``parts`` did not keep."""
    tokens = merged.shape[0]
    if "norms" in parts:
        _rms_norm(s, s.t(tokens, d))                 # input of the q/k/v weight gradients
    if "rope" in parts:
        _rope(s, s.t(tokens, d))
        _rope(s, s.t(tokens, kv_width))
    if "attention" in parts:
        _flash_attention(s, qh, kh)                  # output and logsumexp for its backward
    if "out_proj" in parts:
        s.op("aten::add", [s.t(tokens, d), _frozen_linear(s, merged, d, d)], [s.t(tokens, d)], alpha=1)
    if "norms" in parts:
        _rms_norm(s, s.t(tokens, d))
    if "mlp_in" in parts:
        _mlp_in(s, s.t(tokens, d), d, ffn)


def lora_llama_step(layers: int, seq: int = 2048, batch: int = 1, rank: int = 16, dtype: str = "bfloat16",
                    recompute: frozenset[str] = frozenset(), **dims) -> list[OpRecord]:
    """A LoRA fine-tuning step of a Llama block stack (frozen base weights), as eager aten ops.

    ``recompute``: parts of each layer's forward (``REMAT_PARTS``) replayed before its backward,
    as activation rematerialisation does; empty keeps every activation (no remat)."""
    unknown = set(recompute) - REMAT_PARTS
    if unknown:
        raise ValueError(f"unknown remat parts {sorted(unknown)}; known: {sorted(REMAT_PARTS)}")
    cfg = {**LLAMA_8B, **dims}
    d, heads, kv, ffn, vocab = cfg["d"], cfg["heads"], cfg["kv_heads"], cfg["ffn"], cfg["vocab"]
    s, tokens, hd = OpStream(dtype), batch * seq, d // heads
    saved = []
    for _ in range(layers):
        x = s.t(tokens, d)
        h = _rms_norm(s, x)
        q = _rope(s, _frozen_linear(s, h, d, d, rank))
        k = _rope(s, _frozen_linear(s, h, d, kv * hd))
        _frozen_linear(s, h, d, kv * hd, rank)
        qh = s.view(q, batch, heads, seq, hd, strides=(seq * d, hd, d, 1))
        kh = s.op("aten::clone", [s.view(k, batch, heads, seq, hd, strides=(0, 0, hd, 1))], [s.t(batch, heads, seq, hd)])
        attn = _flash_attention(s, qh, kh)
        merged = s.op("aten::clone", [attn], [s.t(tokens, d)])
        x = s.op("aten::add", [x, _frozen_linear(s, merged, d, d)], [s.t(tokens, d)], alpha=1)
        h2 = _rms_norm(s, x)
        gate, up, act = _mlp_in(s, h2, d, ffn)
        s.op("aten::add", [x, _frozen_linear(s, act, ffn, d)], [s.t(tokens, d)], alpha=1)
        saved.append((h, qh, kh, attn, merged, h2, gate, up, act))
    h = _rms_norm(s, s.t(tokens, d))
    lm_loss_backward(s, _frozen_linear(s, h, d, vocab), h, s.t(vocab, d))
    for h, qh, kh, attn, merged, h2, gate, up, act in reversed(saved):
        if recompute:
            _rematerialise(s, recompute, qh, kh, merged, rank, d, kv * hd, ffn)
        g = s.t(tokens, d)
        _frozen_linear_backward(s, g, act, ffn, d)
        g_act = s.t(tokens, ffn)
        s.op("aten::silu_backward", [s.op("aten::mul", [g_act, up], [s.t(tokens, ffn)]), gate], [s.t(tokens, ffn)])
        s.op("aten::mul", [g_act, gate], [s.t(tokens, ffn)])
        _frozen_linear_backward(s, s.t(tokens, ffn), h2, d, ffn)
        _frozen_linear_backward(s, s.t(tokens, ffn), h2, d, ffn)
        _frozen_linear_backward(s, g, merged, d, d)
        s.op("aten::_scaled_dot_product_flash_attention_for_cpu_backward",
             [s.t(batch, heads, seq, hd), qh, kh, kh, attn, s.t(batch, heads, seq)],
             [s.t(batch, heads, seq, hd)] * 3, is_causal=True, dropout_p=0.0)
        for width, r in ((d, rank), (kv * hd, 0), (kv * hd, rank)):
            _frozen_linear_backward(s, s.t(tokens, width), h, d, width, r)
    adapters = [s.t(rank, d), s.t(d, rank), s.t(rank, d), s.t(kv * hd, rank)] * layers
    steps = [TensorDesc((), "float32") for _ in adapters]
    s.op("aten::_fused_adamw_", [*adapters, *adapters, *adapters, *adapters, *steps], [], lr=1e-4, beta1=0.9,
         beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    return s.records


def per_layer_replay(one: list, two: list, layers: int,
                     cost: Callable[[list, object], float] = replay) -> Callable[[NeuronConfig], float]:
    """``run(target) -> ns`` of ``layers`` layers from kept 1- and 2-layer workloads, each timed
    by ``cost(workload, target)`` (a NeuronCore replay by default)."""

    def run(target: NeuronConfig) -> float:
        t1 = cost(one, target)
        return t1 + (layers - 1) * (cost(two, target) - t1)

    return run


def per_layer_run(build: Callable[[int], list], layers: int) -> Callable[[NeuronConfig], float]:
    """``run(target) -> ns`` of a ``layers``-deep stream, extrapolated from 1- and 2-layer streams."""
    return per_layer_replay(build(1), build(2), layers)


def _mamba_layer(delta, A, B, u, C):
    """The NKI Mamba tutorial's PyTorch reference: broadcasts, a sequential scan, a state-axis sum."""
    import torch
    delta_a = torch.exp(delta[:, :, None, :] * A[None, :, :, None])            # [b, c, s, l]
    delta_b_u = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    scan = torch.empty_like(delta_a)
    for i in range(delta_a.shape[-1]):
        prev = scan[..., i - 1] if i > 0 else 0
        scan[..., i] = delta_a[..., i] * prev + delta_b_u[..., i]
    return (C[:, None, :, :] * scan).sum(dim=-2)


def mamba_workload(target: str = "trn1", batch: int = 1, seq: int = 512, channels: int = 256, state: int = 16,
                   compiled: bool = False):
    """(workload, target config) of the Mamba layer run with torch on ``neuron``: eagerly, or
    through ``torch.compile(backend="neuron")`` (Dynamo unrolls the scan; the kept call is the
    second, after compilation)."""
    import torch
    from workbench.session import profile
    torch.manual_seed(0)
    dev = dict(device="neuron", dtype=torch.float32)
    delta, u = torch.rand(batch, channels, seq, **dev), torch.rand(batch, channels, seq, **dev)
    A = -torch.rand(channels, state, **dev)
    B, C = torch.rand(batch, state, seq, **dev), torch.rand(batch, state, seq, **dev)
    layer = _mamba_layer
    if compiled:
        torch._dynamo.reset()
        layer = torch.compile(_mamba_layer, backend="neuron")
        layer(delta, A, B, u, C)
    with profile(target=target, source=False) as prof:
        layer(delta, A, B, u, C)
    return prof.workload, prof.workload_target
