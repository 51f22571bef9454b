"""The workbench's one Llama: notebooks, benchmarks, fidelity cases and tests all run this module.

It computes what Hugging Face's ``LlamaForCausalLM`` computes, op for op, with the same module
tree and parameter names (a ``LlamaForCausalLM`` state dict loads into it as is; tests check
the logits agree): RMSNorm in fp32, rotary embeddings (with Llama 3.1's frequency scaling),
grouped-query attention through ``F.scaled_dot_product_attention`` with the K/V heads repeated
(``repeat_kv``) and, for one query token, the query heads folded onto their K/V head
(``pack_gqa``), SwiGLU, residuals, an optionally tied LM head.

Why not ``transformers.LlamaForCausalLM`` itself: the fidelity cases need what it cannot state.
(1) Selective activation recomputation by named value, as MaxText's and NxD's published recipes
configure it (``Remat``); Hugging Face offers whole-layer checkpointing only. (2) Attention on
the ``neuron`` device's fused SDPA path: transformers 5 passes ``enable_gqa=True`` when there is
no mask, which PyTorch's fused CPU-style path rejects, so SDPA falls back to the unfused math
form (fp32 upcast, explicit softmax), which neither Neuron's kernels nor the published runs use.
(3) LoRA without peft as a dependency (``lora.py`` attaches the same modules). Everything else is
Hugging Face's arithmetic, so a model loaded from the hub computes the same logits here.

Built on ``neuron`` in timing-only mode (``with torch.device("neuron"), torch.neuron.timing_only():``
or ``wb.set_device("neuron", timing_only=True)``) it holds no values, so 70B shapes build in
seconds; ``dtype`` builds the parameters directly in that dtype (no fp32 copy on the device).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workbench.models.configs import LlamaConfig, llama_config
from workbench.models.lora import Lora, attach_lora
from workbench.models.remat import Remat, named
from workbench.models.tensor_parallel import ColumnParallelLinear, ParallelEmbedding, RowParallelLinear, TensorParallel

__all__ = ["Llama", "LlamaRMSNorm", "StaticLayerCache", "rope_inverse_frequencies", "apply_rotary_pos_emb",
           "repeat_kv"]


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype != input_dtype:
            # A norm kept wider than its input (fp32 under Standard Mixed Precision) scales in its own
            # dtype and returns the input's, as NxD's LlamaRMSNorm: ``(self.weight * hidden_states).to(input_dtype)``.
            return (self.weight * hidden_states).to(input_dtype)
        return self.weight * hidden_states.to(input_dtype)


def rope_inverse_frequencies(config: LlamaConfig) -> torch.Tensor:
    """fp32 inverse frequencies of the rotary embedding, with Llama 3.1's scaling when configured
    (``transformers.modeling_rope_utils._compute_llama3_parameters``)."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    s = config.rope_scaling
    if s is None:
        return inv_freq
    low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.register_buffer("inv_freq", rope_inverse_frequencies(config), persistent=False)
        self.attention_scaling = 1.0

    def forward(self, x, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep: int):
    """(batch, kv_heads, seq, head_dim) -> (batch, kv_heads * n_rep, seq, head_dim)."""
    batch, kv_heads, seq, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, kv_heads, n_rep, seq, head_dim)
    return hidden_states.reshape(batch, kv_heads * n_rep, seq, head_dim)


def _sdpa(query, key, value, groups: int):
    """Hugging Face's ``sdpa_attention_forward`` without ``enable_gqa``: one query token attends
    over every key with its heads folded onto their K/V head (``pack_gqa``); longer queries repeat
    the K/V heads and are causal, with an explicit mask when keys precede them (a chunk after a cache)."""
    batch, heads, q_len, head_dim = query.shape
    kv_len = key.shape[2]
    if q_len == 1:
        if groups > 1:
            query = query.reshape(batch, heads // groups, groups, head_dim)
        out = F.scaled_dot_product_attention(query, key, value)
        return out.reshape(batch, heads, 1, head_dim).transpose(1, 2).contiguous()
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    if kv_len == q_len:
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True)
    else:
        mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(kv_len - q_len)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    return out.transpose(1, 2).contiguous()


class StaticLayerCache(list):
    """One layer's ``[keys, values]`` of a static KV cache (``Llama.new_cache(max_len)``): both
    preallocated for ``max_len`` positions, each step's keys and values written in place at its
    positions, as Hugging Face's ``StaticCache`` and transformers-neuronx's KV cache keep them;
    attention reads the positions filled so far (a view, no copy)."""


def _linears(config: LlamaConfig, tp: TensorParallel | None, dtype):
    """(column, row, heads, kv_heads): the linear layers' constructors and this rank's head counts --
    ``nn.Linear`` and all heads, or tensor-parallel layers and this rank's share (``tp``)."""
    if tp is None:
        plain = lambda i, o: nn.Linear(i, o, bias=False, dtype=dtype)      # noqa: E731
        return plain, plain, config.num_attention_heads, config.num_key_value_heads
    tp.check_world()
    return (lambda i, o: ColumnParallelLinear(i, o, tp, dtype)), (lambda i, o: RowParallelLinear(i, o, tp, dtype)), \
        tp.divide(config.num_attention_heads, "num_attention_heads"), tp.kv_heads(config.num_key_value_heads)


class LlamaAttention(nn.Module):
    """Grouped-query attention; with ``tp``, this rank's heads: q/k/v column-parallel (one fused
    ``qkv_proj`` with ``tp.fuse_qkv``, K/V heads replicated up to one per rank), o row-parallel."""

    def __init__(self, config: LlamaConfig, dtype=None, tp: TensorParallel | None = None):
        super().__init__()
        d, hd = config.hidden_size, config.head_dim
        column, row, heads, kv_heads = _linears(config, tp, dtype)
        self.head_dim, self.num_key_value_groups = hd, heads // kv_heads
        if tp is not None and tp.fuse_qkv:
            self.split = (heads * hd, kv_heads * hd, kv_heads * hd)
            self.qkv_proj = column(d, (config.num_attention_heads + 2 * kv_heads * tp.degree) * hd)
        else:
            kv_width = kv_heads * hd * (1 if tp is None else tp.degree)
            self.q_proj = column(d, config.num_attention_heads * hd)
            self.k_proj = column(d, kv_width)
            self.v_proj = column(d, kv_width)
        self.o_proj = row(config.num_attention_heads * hd, d)

    def _project(self, hidden_states):
        if hasattr(self, "qkv_proj"):
            with named("qkv_proj"):
                return self.qkv_proj(hidden_states).split(self.split, dim=-1)
        with named("query_proj"):
            query = self.q_proj(hidden_states)
        with named("key_proj"):
            key = self.k_proj(hidden_states)
        with named("value_proj"):
            value = self.v_proj(hidden_states)
        return query, key, value

    def forward(self, hidden_states, cos, sin, cache: list | None = None, start: int = 0):
        """``cache``: this layer's ``[keys, values]`` so far (empty before the prefill), to which
        the new keys and values are appended, as Hugging Face's ``DynamicCache`` does -- or a
        ``StaticLayerCache``, written in place at positions ``start``..."""
        query, key, value = (t.view(*t.shape[:-1], -1, self.head_dim).transpose(1, 2)
                             for t in self._project(hidden_states))
        with named("rope"):
            query, key = apply_rotary_pos_emb(query, key, cos, sin)
        if isinstance(cache, StaticLayerCache):
            end = start + key.shape[2]
            cache[0][:, :, start:end].copy_(key)
            cache[1][:, :, start:end].copy_(value)
            key, value = cache[0][:, :, :end], cache[1][:, :, :end]
        elif cache is not None:
            if cache:
                key, value = torch.cat((cache[0], key), dim=2), torch.cat((cache[1], value), dim=2)
            cache[:] = [key, value]
        with named("attention"):
            out = _sdpa(query, key, value, self.num_key_value_groups)
        with named("out_proj"):
            return self.o_proj(out.reshape(*out.shape[:2], -1))


class LlamaMLP(nn.Module):
    """SwiGLU; with ``tp``, this rank's 1/TP of the FFN: gate and up column-parallel (one fused
    ``gate_up_proj`` with ``tp.fuse_gate_up``), down row-parallel."""

    def __init__(self, config: LlamaConfig, dtype=None, tp: TensorParallel | None = None):
        super().__init__()
        d, ffn = config.hidden_size, config.intermediate_size
        column, row, _, _ = _linears(config, tp, dtype)
        if tp is not None and tp.fuse_gate_up:
            self.split = tp.divide(ffn, "intermediate_size")
            self.gate_up_proj = column(d, 2 * ffn)
        else:
            self.gate_proj = column(d, ffn)
            self.up_proj = column(d, ffn)
        self.down_proj = row(ffn, d)

    def forward(self, x):
        if hasattr(self, "gate_up_proj"):
            with named("mlp_gate_up"):
                gate, up = self.gate_up_proj(x).split(self.split, dim=-1)
        else:
            with named("mlp_gate"):
                gate = self.gate_proj(x)
            with named("mlp_up"):
                up = self.up_proj(x)
        with named("mlp_act"):
            act = F.silu(gate) * up
        with named("mlp_down"):
            return self.down_proj(act)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig, dtype=None, tp: TensorParallel | None = None):
        super().__init__()
        self.self_attn = LlamaAttention(config, dtype, tp)
        self.mlp = LlamaMLP(config, dtype, tp)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps, dtype)

    def forward(self, hidden_states, cos, sin, cache: list | None = None, start: int = 0):
        residual = hidden_states
        with named("input_norm"):
            hidden_states = self.input_layernorm(hidden_states)
        hidden_states = residual + self.self_attn(hidden_states, cos, sin, cache, start)
        residual = hidden_states
        with named("post_norm"):
            hidden_states = self.post_attention_layernorm(hidden_states)
        return residual + self.mlp(hidden_states)


class LlamaModel(nn.Module):
    def __init__(self, config: LlamaConfig, dtype=None, tp: TensorParallel | None = None):
        super().__init__()
        if tp is None:
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, dtype=dtype)
        else:
            self.embed_tokens = ParallelEmbedding(config.vocab_size, config.hidden_size, tp, dtype)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, dtype, tp) for _ in range(config.num_hidden_layers))
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(self, input_ids, cache: list | None = None, start: int = 0, remat: Remat | None = None):
        hidden_states = self.embed_tokens(input_ids)
        position_ids = torch.arange(start, start + input_ids.shape[1], device=input_ids.device)[None]
        cos, sin = self.rotary_emb(hidden_states, position_ids)
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache[i]
            if remat is not None and layer_cache is None and torch.is_grad_enabled():
                hidden_states = remat(layer, hidden_states, cos, sin)
            else:
                hidden_states = layer(hidden_states, cos, sin, layer_cache, start)
        return self.norm(hidden_states)


class Llama(nn.Module):
    """A Llama causal LM (Hugging Face's ``LlamaForCausalLM``: ``model`` and ``lm_head``).

    ``config``: a :class:`LlamaConfig` or a name in ``LLAMA_CONFIGS`` (``"Llama-3.1-8B"``);
    ``lora``: adapters attached as peft does (base frozen); ``remat``: activation recomputation
    of each decoder layer in training; ``dtype``: the parameters' dtype (default: torch's).
    ``tensor_parallel``: build this rank's shard (``TensorParallel``, the default process group's
    size) as NeuronX Distributed's Llama: vocab-parallel embedding, column-parallel q/k/v and
    gate/up, row-parallel o and down, column-parallel (vocab-parallel) ``lm_head``, whose logits
    stay split (``parallel_cross_entropy``, ``gather_from_tensor_parallel_region``)."""

    def __init__(self, config: LlamaConfig | str, *, lora: Lora | None = None, remat: Remat | None = None,
                 dtype: torch.dtype | None = None, tensor_parallel: TensorParallel | None = None):
        super().__init__()
        if lora is not None and tensor_parallel is not None:
            raise NotImplementedError("LoRA adapters wrap nn.Linear layers; a tensor-parallel shard has none")
        self.config = llama_config(config) if isinstance(config, str) else config
        self.remat, self.tensor_parallel = remat, tensor_parallel
        self.model = LlamaModel(self.config, dtype, tensor_parallel)
        if tensor_parallel is None:
            self.lm_head = nn.Linear(self.config.hidden_size, self.config.vocab_size, bias=False, dtype=dtype)
        else:
            self.lm_head = ColumnParallelLinear(self.config.hidden_size, self.config.vocab_size, tensor_parallel, dtype)
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        if lora is not None:
            attach_lora(self, lora)

    def new_cache(self, max_len: int = 0, batch: int = 1) -> list[list]:
        """An empty KV cache: one ``[keys, values]`` list per layer, filled by the first forward;
        with ``max_len``, a static cache of ``batch`` sequences of ``max_len`` positions
        (``StaticLayerCache``, allocated uninitialised on the parameters' device and dtype)."""
        if not max_len:
            return [[] for _ in self.model.layers]
        attention = self.model.layers[0].self_attn
        weight = attention.o_proj.weight
        kv_heads = attention.o_proj.in_features // attention.head_dim // attention.num_key_value_groups
        shape = (batch, kv_heads, max_len, attention.head_dim)
        return [StaticLayerCache(torch.empty(shape, dtype=weight.dtype, device=weight.device) for _ in range(2))
                for _ in self.model.layers]

    def forward(self, input_ids, cache: list | None = None, start: int = 0, logits_to_keep: int = 0):
        """Logits of ``input_ids`` at positions ``start``... (of the last ``logits_to_keep`` only, when
        given, as generation asks for); ``cache`` (``new_cache()``) is filled (prefill) or
        extended (decode)."""
        hidden_states = self.model(input_ids, cache, start, self.remat)
        if logits_to_keep and self.tensor_parallel is not None and self.tensor_parallel.sequence_parallel:
            raise ValueError("logits_to_keep needs the whole sequence on each rank; sequence parallelism splits it")
        if logits_to_keep:
            hidden_states = hidden_states[:, -logits_to_keep:, :]
        return self.lm_head(hidden_states)
