"""A Hugging Face KV cache that writes new tokens into preallocated slots, as paged attention does.

``DynamicCache`` appends with ``torch.cat``, copying a layer's whole cache every decode step;
serving engines (vLLM's ``reshape_and_cache``) write only the new tokens' slots and attention
reads the context in place. :func:`slot_cache` builds a ``DynamicCache`` whose layers hold
``cached`` tokens in buffers made outside the profile and write ``new`` tokens by a slice copy,
so a profiled forward pays what a serving engine pays: the new slots and the attention reads.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

__all__ = ["slot_cache", "slot_bytes_per_token"]


class _SlotLayer(DynamicLayer):
    def __init__(self, keys: torch.Tensor, values: torch.Tensor, cached: int):
        super().__init__()
        self._key_slots, self._value_slots, self._cached = keys, values, cached
        self.device, self.is_initialized = keys.device, True
        self.keys, self.values = keys[:, :, :cached], values[:, :, :cached]

    def update(self, key_states, value_states, *args, **kwargs):
        end = self._cached + key_states.shape[-2]
        self._key_slots[:, :, self._cached:end].copy_(key_states)
        self._value_slots[:, :, self._cached:end].copy_(value_states)
        self._cached = end
        self.keys, self.values = self._key_slots[:, :, :end], self._value_slots[:, :, :end]
        return self.keys, self.values


def slot_cache(config, batch: int, cached: int, new: int, dtype: torch.dtype, device="neuron") -> DynamicCache:
    """A cache of ``batch`` sequences holding ``cached`` tokens with room for ``new`` more, per layer.

    The layers share one pair of buffers: timing-only tensors hold no values, every layer still
    reads and writes its own slots in the trace, and the simulated device holds one layer's KV."""
    heads, head_dim = config.num_key_value_heads, config.head_dim
    keys = torch.empty(batch, heads, cached + new, head_dim, dtype=dtype, device=device)
    values = torch.empty(batch, heads, cached + new, head_dim, dtype=dtype, device=device)
    cache = DynamicCache()
    cache.layers = [_SlotLayer(keys, values, cached) for _ in range(config.num_hidden_layers)]
    return cache


def slot_bytes_per_token(config, dtype: torch.dtype) -> int:
    """Bytes :func:`slot_cache` allocates per cached token (keys and values of one layer)."""
    return 2 * config.num_key_value_heads * config.head_dim * torch.tensor([], dtype=dtype).element_size()
