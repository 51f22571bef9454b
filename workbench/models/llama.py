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

__all__ = ["Llama", "LlamaRMSNorm", "rope_inverse_frequencies", "apply_rotary_pos_emb", "repeat_kv"]


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


class LlamaAttention(nn.Module):
    def __init__(self, config: LlamaConfig, dtype=None):
        super().__init__()
        d, hd = config.hidden_size, config.head_dim
        self.head_dim, self.num_key_value_groups = hd, config.num_attention_heads // config.num_key_value_heads
        self.q_proj = nn.Linear(d, config.num_attention_heads * hd, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(d, config.num_key_value_heads * hd, bias=False, dtype=dtype)
        self.v_proj = nn.Linear(d, config.num_key_value_heads * hd, bias=False, dtype=dtype)
        self.o_proj = nn.Linear(config.num_attention_heads * hd, d, bias=False, dtype=dtype)

    def forward(self, hidden_states, cos, sin, cache: list | None = None):
        """``cache``: this layer's ``[keys, values]`` so far (empty before the prefill); the new
        keys and values are appended, as Hugging Face's ``DynamicCache`` does."""
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        with named("query_proj"):
            query = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        with named("key_proj"):
            key = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        with named("value_proj"):
            value = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        with named("rope"):
            query, key = apply_rotary_pos_emb(query, key, cos, sin)
        if cache is not None:
            if cache:
                key, value = torch.cat((cache[0], key), dim=2), torch.cat((cache[1], value), dim=2)
            cache[:] = [key, value]
        with named("attention"):
            out = _sdpa(query, key, value, self.num_key_value_groups)
        with named("out_proj"):
            return self.o_proj(out.reshape(*hidden_states.shape[:-1], -1))


class LlamaMLP(nn.Module):
    def __init__(self, config: LlamaConfig, dtype=None):
        super().__init__()
        d, ffn = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(d, ffn, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(d, ffn, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(ffn, d, bias=False, dtype=dtype)

    def forward(self, x):
        with named("mlp_gate"):
            gate = self.gate_proj(x)
        with named("mlp_up"):
            up = self.up_proj(x)
        with named("mlp_act"):
            act = F.silu(gate) * up
        with named("mlp_down"):
            return self.down_proj(act)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig, dtype=None):
        super().__init__()
        self.self_attn = LlamaAttention(config, dtype)
        self.mlp = LlamaMLP(config, dtype)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps, dtype)

    def forward(self, hidden_states, cos, sin, cache: list | None = None):
        residual = hidden_states
        with named("input_norm"):
            hidden_states = self.input_layernorm(hidden_states)
        hidden_states = residual + self.self_attn(hidden_states, cos, sin, cache)
        residual = hidden_states
        with named("post_norm"):
            hidden_states = self.post_attention_layernorm(hidden_states)
        return residual + self.mlp(hidden_states)


class LlamaModel(nn.Module):
    def __init__(self, config: LlamaConfig, dtype=None):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, dtype=dtype)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, dtype) for _ in range(config.num_hidden_layers))
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
                hidden_states = layer(hidden_states, cos, sin, layer_cache)
        return self.norm(hidden_states)


class Llama(nn.Module):
    """A Llama causal LM (Hugging Face's ``LlamaForCausalLM``: ``model`` and ``lm_head``).

    ``config``: a :class:`LlamaConfig` or a name in ``LLAMA_CONFIGS`` (``"Llama-3.1-8B"``);
    ``lora``: adapters attached as peft does (base frozen); ``remat``: activation recomputation
    of each decoder layer in training; ``dtype``: the parameters' dtype (default: torch's)."""

    def __init__(self, config: LlamaConfig | str, *, lora: Lora | None = None, remat: Remat | None = None,
                 dtype: torch.dtype | None = None):
        super().__init__()
        self.config = llama_config(config) if isinstance(config, str) else config
        self.remat = remat
        self.model = LlamaModel(self.config, dtype)
        self.lm_head = nn.Linear(self.config.hidden_size, self.config.vocab_size, bias=False, dtype=dtype)
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        if lora is not None:
            attach_lora(self, lora)

    def new_cache(self) -> list[list]:
        """An empty KV cache: one ``[keys, values]`` list per layer, filled by the first forward."""
        return [[] for _ in self.model.layers]

    def forward(self, input_ids, cache: list | None = None, start: int = 0, logits_to_keep: int = 0):
        """Logits of ``input_ids`` at positions ``start``... (of the last ``logits_to_keep`` only, when
        given, as generation asks for); ``cache`` (``new_cache()``) is filled (prefill) or
        extended (decode)."""
        hidden_states = self.model(input_ids, cache, start, self.remat)
        if logits_to_keep:
            hidden_states = hidden_states[:, -logits_to_keep:, :]
        return self.lm_head(hidden_states)
