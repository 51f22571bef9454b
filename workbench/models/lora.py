"""LoRA adapters attached as peft attaches them (``peft.LoraConfig`` + ``get_peft_model``).

Each targeted ``nn.Linear`` is replaced by a :class:`LoraLinear` that keeps it as ``base_layer``
and adds ``lora_B(lora_A(dropout(x))) * scaling`` to its output (peft's ``lora.Linear.forward``):
``lora_A`` initialised as an ``nn.Linear``, ``lora_B`` zeros, ``scaling = lora_alpha / r``.
Every parameter outside the adapters is frozen (peft's ``mark_only_lora_as_trainable``).
peft itself is not a dependency; these are the same modules and the same arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["Lora", "LoraLinear", "attach_lora"]


@dataclass(frozen=True)
class Lora:
    """peft's ``LoraConfig`` fields that shape the computation (its defaults: r 8, alpha 8)."""

    r: int = 8
    lora_alpha: float = 8.0
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    lora_dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"LoRA rank r must be at least 1, got {self.r}")


class LoraLinear(nn.Module):
    """A frozen ``base_layer`` plus a rank-``r`` update (peft's ``lora.Linear``, one adapter)."""

    def __init__(self, base_layer: nn.Linear, lora: Lora):
        super().__init__()
        factory = dict(device=base_layer.weight.device, dtype=base_layer.weight.dtype)
        self.base_layer = base_layer
        self.lora_dropout = nn.Dropout(lora.lora_dropout) if lora.lora_dropout else nn.Identity()
        self.lora_A = nn.Linear(base_layer.in_features, lora.r, bias=False, **factory)
        self.lora_B = nn.Linear(lora.r, base_layer.out_features, bias=False, **factory)
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = lora.lora_alpha / lora.r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        return result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def attach_lora(model: nn.Module, lora: Lora) -> nn.Module:
    """Wrap every ``nn.Linear`` whose name ends in one of ``lora.target_modules`` and freeze all
    other parameters; returns ``model``. Raises if no module matches (as peft does)."""
    targets = [(name, module) for name, module in model.named_modules()
               if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in lora.target_modules]
    if not targets:
        raise ValueError(f"LoRA target modules {list(lora.target_modules)} not found in {type(model).__name__}")
    for p in model.parameters():
        p.requires_grad_(False)
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, LoraLinear(module, lora))
    return model
