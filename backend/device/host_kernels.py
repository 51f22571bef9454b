"""Host kernels for ops CPU has no kernel of its own for, that the device still receives.

``scaled_dot_product_attention`` on the device takes PyTorch's fused "overrideable" path (the C++
hooks choose it where CPU would run its flash kernel, as TorchNeuron does); its forward and
backward run CPU's flash-attention kernels on the host tensors, so values equal CPU's own SDPA.
Grouped-query attention reaches the fused op with fewer K/V heads than query heads (the device
reads each KV head once per group); CPU's flash kernel wants equal heads, so the host repeats K
and V for it, and the backward sums each group's key and value gradients.
"""
from __future__ import annotations

import torch

__all__ = ["HOST_KERNELS"]

aten = torch.ops.aten


def _empty(like: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=torch.int64, device=like.device)


def _group(query: torch.Tensor, key: torch.Tensor) -> int:
    """Query heads per key/value head (1 without grouped-query attention)."""
    return query.size(-3) // key.size(-3)


def _repeat_heads(x: torch.Tensor, group: int) -> torch.Tensor:
    """Each head of ``x`` repeated ``group`` times in place (``repeat_interleave`` on the head dim,
    written as a view and a copy, which meta and fake tensors also take)."""
    if group == 1:
        return x
    *batch, heads, length, dim = x.shape
    return x.unsqueeze(-3).expand(*batch, heads, group, length, dim).reshape(*batch, heads * group, length, dim)


def _fused_attention(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False,
                     *, scale=None):
    group = _group(query, key)
    out, logsumexp = aten._scaled_dot_product_flash_attention_for_cpu(
        query, _repeat_heads(key, group), _repeat_heads(value, group), dropout_p, is_causal, attn_mask=attn_bias,
        scale=scale)
    none = _empty(query)
    return out, logsumexp, none, none, query.size(2), key.size(2), none, none, torch.empty(0, dtype=query.dtype,
                                                                                          device=query.device)


def _fused_attention_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                              cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *,
                              scale=None):
    group = _group(query, key)
    grad_query, grad_key, grad_value = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, _repeat_heads(key, group), _repeat_heads(value, group), out, logsumexp, dropout_p, is_causal,
        attn_mask=attn_bias, scale=scale)
    if group > 1:
        grad_key, grad_value = (g.unflatten(-3, (-1, group)).sum(-3) for g in (grad_key, grad_value))
    # CPU's choice never takes this path for a mask that needs a gradient (it runs math then)
    return grad_query, grad_key, grad_value, None


HOST_KERNELS = {
    aten._scaled_dot_product_fused_attention_overrideable.default: _fused_attention,
    aten._scaled_dot_product_fused_attention_overrideable_backward.default: _fused_attention_backward,
}
