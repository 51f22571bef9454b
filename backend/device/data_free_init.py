"""``torch.nn.init.trunc_normal_`` of a data-free device tensor draws nothing, as of a ``meta`` one.

PyTorch's truncated normal redraws the samples outside [a, b] until none is left, reading
``mask.any()`` each round; for a ``meta`` tensor it draws nothing (no storage). A timing-only
device tensor has no values either, so it is skipped the same way instead of raising
``TimingOnlyError`` at the first read (Hugging Face's ViT, timm and DeiT initialise with it).
Tensors with values, small timing-only ones included, draw as usual. The other ``nn.init``
functions only write (``normal_``, ``uniform_``, ``fill_``), which data-free tensors accept.
"""
from __future__ import annotations

import functools

import torch.nn.init

from .tensor import DeviceTensor

__all__ = ["install"]

_MARK = "_workbench_data_free_init"


def _skips_data_free(draw):
    @functools.wraps(draw)
    def trunc_normal(tensor, *args, **kwargs):
        if isinstance(tensor, DeviceTensor) and tensor._inner.is_meta:
            return tensor
        return draw(tensor, *args, **kwargs)
    setattr(trunc_normal, _MARK, True)
    return trunc_normal


def install() -> None:
    """Once per process (``trunc_normal_`` looks its sampler up on the module at each call)."""
    if not getattr(torch.nn.init._no_grad_trunc_normal_, _MARK, False):
        torch.nn.init._no_grad_trunc_normal_ = _skips_data_free(torch.nn.init._no_grad_trunc_normal_)
