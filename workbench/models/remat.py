"""Activation rematerialisation of a decoder layer by named values, as MaxText's remat policies
(``jax.checkpoint_policies.save_only_these_names``) and NxD's selective checkpointing state it.

The layer's forward marks what each stretch of it computes (``with named("query_proj"):``); a
:class:`Remat` runs the layer under PyTorch's selective activation checkpointing
(``torch.utils.checkpoint`` with ``create_selective_checkpoint_contexts``): the outputs of ops
inside a saved name are kept for backward, every other activation is recomputed from the
layer's input when backward needs it (recomputation stops once it has what backward reads).
``Remat()`` (nothing saved) is whole-layer checkpointing, Hugging Face's
``gradient_checkpointing_enable()``.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

__all__ = ["Remat", "named", "NAMES", "saving", "replaying_saved"]

# The names a Llama decoder layer marks (MaxText's names where it has one; the fused projections
# of a tensor-parallel layer, ``qkv_proj`` and ``mlp_gate_up``, after NxD's modules).
NAMES = frozenset({"input_norm", "query_proj", "key_proj", "value_proj", "qkv_proj", "rope", "attention", "out_proj",
                   "post_norm", "mlp_gate", "mlp_up", "mlp_gate_up", "mlp_act", "mlp_down"})

_CURRENT: ContextVar[str | None] = ContextVar("workbench_remat_name", default=None)
_RUNNING: ContextVar[tuple[Remat, bool] | None] = ContextVar("workbench_remat_running", default=None)


def saving() -> bool:
    """Whether the code running now is inside a name a running :class:`Remat` saves (in the
    forward pass, or while it recomputes a layer)."""
    running = _RUNNING.get()
    return running is not None and _CURRENT.get() in running[0].saved


def replaying_saved() -> bool:
    """Whether a :class:`Remat` is recomputing a layer and the code running now is inside a
    saved name: its ops hand back the values the forward saved instead of running again."""
    running = _RUNNING.get()
    return running is not None and running[1] and _CURRENT.get() in running[0].saved


@contextlib.contextmanager
def _running(remat: Remat, recomputing: bool, context):
    token = _RUNNING.set((remat, recomputing))
    try:
        with context:
            yield
    finally:
        _RUNNING.reset(token)


def named(name: str):
    """Mark the ops run inside as computing ``name`` (one of ``NAMES``). Under ``torch.compile``
    it marks nothing (Dynamo would break the graph at each context variable), so a saving
    :class:`Remat` refuses to run there."""
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    return _named(name)


@contextlib.contextmanager
def _named(name: str):
    token = _CURRENT.set(name)
    try:
        yield
    finally:
        _CURRENT.reset(token)


@dataclass(frozen=True)
class Remat:
    """Save only the values named in ``saved`` (and each layer's input); recompute the rest."""

    saved: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "saved", frozenset(self.saved))
        unknown = self.saved - NAMES
        if unknown:
            raise ValueError(f"unknown remat names {sorted(unknown)}; known: {sorted(NAMES)}")

    @property
    def recomputed(self) -> frozenset[str]:
        return NAMES - self.saved

    def _policy(self, ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if _CURRENT.get() in self.saved else CheckpointPolicy.PREFER_RECOMPUTE

    def _contexts(self):
        forward, recompute = create_selective_checkpoint_contexts(self._policy)
        return _running(self, False, forward), _running(self, True, recompute)

    def __call__(self, function, *args, **kwargs):
        """``function(*args, **kwargs)`` under this policy."""
        if self.saved and torch.compiler.is_compiling():
            raise NotImplementedError("Remat(saved=...) selects values by name, which runs eagerly; under "
                                      "torch.compile use Remat() (whole-layer recomputation)")
        extra = {"context_fn": self._contexts} if self.saved else {}
        return checkpoint(function, *args, use_reentrant=False, **extra, **kwargs)
