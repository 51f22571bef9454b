"""Decode attention as a serving engine's kernel runs it, for Hugging Face models.

Grouped-query attention in Hugging Face repeats each KV head for its query heads
(``repeat_kv``, or SDPA's ``enable_gqa``), which copies the whole cache every step; paged
attention kernels (vLLM, NxD Inference) read each KV head once for its group of query heads.
For a decode step (one query per sequence) the group folds into the query length: queries
``(batch, kv_heads, group, head_dim)`` attend to ``(batch, kv_heads, context, head_dim)``
with one fused SDPA, every key visible. Prefills keep Hugging Face's SDPA path (causal).
Registered under :data:`ATTENTION` in ``transformers.AttentionInterface``.
"""
from __future__ import annotations

import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

__all__ = ["ATTENTION", "register"]

ATTENTION = "workbench_serving"


def serving_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    batch, heads, length, head_dim = query.shape
    kv_heads = key.shape[1]
    if length != 1 or heads == kv_heads:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    folded = query.reshape(batch, kv_heads, heads // kv_heads, head_dim)
    out = F.scaled_dot_product_attention(folded, key, value, scale=scaling)
    return out.reshape(batch, heads, 1, head_dim).transpose(1, 2), None


def register() -> str:
    AttentionInterface.register(ATTENTION, serving_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    return ATTENTION
