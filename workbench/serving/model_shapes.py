"""A causal LM's serving-relevant sizes from its Hugging Face config, and its timing-only build.

Tensor parallelism follows Megatron / vLLM: attention heads, KV heads (replicated when fewer
than ``tp``), the MLP's intermediate size and the vocabulary are split across ``tp`` devices;
the hidden size is not. A device's share of the model is then the same architecture with those
sizes, which is what :func:`shard_config` builds; the all-reduces tensor parallelism adds are
priced separately (``iteration_costs``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

__all__ = ["ModelShape", "model_shape", "shard_config", "build_timing_only"]


@dataclass(frozen=True)
class ModelShape:
    """What serving needs to know about the model, whole (not per device)."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_params: int
    dtype_bytes: int = 2


def _config_of(model_or_config):
    config = getattr(model_or_config, "config", model_or_config)
    if not hasattr(config, "num_hidden_layers") or not hasattr(config, "hidden_size"):
        raise TypeError(f"serve() needs a Hugging Face causal LM or its config (e.g. transformers.LlamaConfig), "
                        f"got {type(model_or_config).__name__}")
    return config


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def model_shape(model_or_config, dtype: torch.dtype = torch.bfloat16) -> ModelShape:
    """The sizes of ``model_or_config`` (a ``PretrainedConfig`` or a model holding one); its
    parameter count from a build on the meta device (no memory anywhere)."""
    from transformers import AutoModelForCausalLM
    config = _config_of(model_or_config)
    with torch.device("meta"):
        num_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    return ModelShape(getattr(config, "name_or_path", "") or config.model_type, config.num_hidden_layers,
                      config.hidden_size, config.num_attention_heads,
                      getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
                      _head_dim(config), config.intermediate_size, config.vocab_size, num_params,
                      torch.tensor([], dtype=dtype).element_size())


def shard_config(model_or_config, tp: int = 1, num_layers: int | None = None):
    """One tensor-parallel device's share of the model as a config of the same architecture
    (``num_layers``: keep only that many layers, to time a layer and extrapolate)."""
    config = copy.deepcopy(_config_of(model_or_config))
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    if tp < 1 or heads % tp or config.intermediate_size % tp:
        raise ValueError(f"tp={tp} must divide the {heads} attention heads and the intermediate size "
                         f"{config.intermediate_size}")
    config.head_dim = _head_dim(config)
    config.num_attention_heads = heads // tp
    config.num_key_value_heads = max(1, kv // tp)
    config.intermediate_size //= tp
    config.vocab_size = -(-config.vocab_size // tp)
    if num_layers is not None:
        config.num_hidden_layers = num_layers
    return config


def build_timing_only(config, dtype: torch.dtype = torch.bfloat16):
    """The model of ``config`` on ``neuron`` in timing-only mode (shapes, no values, no host
    memory), with Hugging Face's SDPA attention (grouped-query attention reads each KV head once
    on the device, as serving kernels do)."""
    from transformers import AutoModelForCausalLM

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("neuron"), torch.neuron.timing_only(values_up_to=0):
            return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    finally:
        torch.set_default_dtype(previous)
