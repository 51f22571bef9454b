"""Megatron / NeuronX Distributed tensor-parallel layers as ``nn.Module``s, for building a rank's shard.

Each layer holds this rank's shard of its weight and exchanges activations through
``torch.distributed`` on the default process group, whose size is the tensor-parallel degree
(a real world from ``wb.launch`` or a ``fake_world``; at degree 1 no collective is issued and
no group is needed, as NxD's mappings return their input unchanged at TP size 1).

Plain TP (Megatron-LM): a column-parallel linear enters the TP region through copy-to-TP
(identity forward, all_reduce of the input gradient backward), a row-parallel linear leaves it
through reduce-from-TP (all_reduce forward, identity backward). Sequence parallel (Korthikanti
et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"): outside the TP
region each rank keeps 1/TP of the tokens, so entering all-gathers the sequence (reduce-scatter
backward) and leaving reduce-scatters it (all-gather backward) -- the bytes of one all_reduce,
while RMSNorm and the residual adds run on 1/TP of the rows. The column-parallel linear keeps
only its 1/TP input shard for backward and all-gathers it again there for the weight gradient,
as NxD's ``LinearWithAsyncCommunication`` and ``GQAQKVLinearWithAsyncCommunication`` do
(src/neuronx_distributed/parallel_layers/layers.py, modules/qkv_linear.py: ``ctx.save_for_
backward(input, weight)`` and, in backward, ``total_input = xm.all_gather(input, ...)``). Every
collective is awaited where it is issued, as NxD's sequence-parallel backward issues them:
``LinearWithAsyncCommunication.backward`` gathers with ``xm.all_gather`` and reduce-scatters with
``xm.reduce_scatter`` (lazy torch_xla ops, no Work handle; ``assert not ctx.async_grad_allreduce``
under sequence parallelism), unlike Megatron-LM's overlapped ``async_op=True`` collectives. Any
overlap is the compiler's schedule of the graph (neuronx-cc places each collective's trigger
and wait), which eager ops do not model.

The models here are batch-first ([batch, seq, hidden]); NxD keeps [seq, batch, hidden] under
sequence parallelism so the split dimension leads. The sequence is moved to the front for each
gather or scatter: a view at batch 1 (the published recipes' micro-batch), a copy otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from backend.device.timing_only import has_data_free
from backend.distributed.reporting import host_tensors
from workbench.models.remat import replaying_saved, saving

__all__ = ["TensorParallel", "ColumnParallelLinear", "RowParallelLinear", "ParallelEmbedding",
           "parallel_cross_entropy", "gather_from_tensor_parallel_region", "tensor_parallel_rank"]


@dataclass(frozen=True)
class TensorParallel:
    """Build a model as one rank's tensor-parallel shard (``wb.models.Llama(..., tensor_parallel=)``).

    ``degree``: the TP degree, the default process group's size. ``sequence_parallel``: split the
    activations outside the TP region by token. ``fuse_qkv`` / ``fuse_gate_up``: one column-parallel
    matmul for q, k and v (one for gate and up) instead of three (two), as NxD's Llama training
    recipe builds them (examples/training/llama/modeling_llama_nxd.py: ``LlamaMLP.gate_up_proj``
    always; ``GQAQKVColumnParallelLinear(..., fuse_qkv=...)`` under ``--qkv_linear``, which
    tp_zero1_llama3_8B_hf_pretrain.sh passes, with ``--fuse_qkv`` defaulting to 1 in
    tp_zero1_llama_hf_pretrain.py). Fused modules are named ``qkv_proj`` and ``gate_up_proj``, as NxD's."""

    degree: int
    sequence_parallel: bool = False
    fuse_qkv: bool = True
    fuse_gate_up: bool = True

    def __post_init__(self) -> None:
        if self.degree < 1:
            raise ValueError(f"tensor-parallel degree must be at least 1, got {self.degree}")

    def check_world(self) -> None:
        """Raise unless the default process group has ``degree`` ranks (degree 1 needs none)."""
        if self.degree == 1:
            return
        if not dist.is_initialized() or dist.get_world_size() != self.degree:
            size = dist.get_world_size() if dist.is_initialized() else "no process group"
            raise ValueError(f"TensorParallel({self.degree}) needs a default process group of {self.degree} ranks "
                             f"(wb.launch or fake_world); found {size}")

    def divide(self, n: int, what: str) -> int:
        if n % self.degree:
            raise ValueError(f"{what} ({n}) is not divisible by the tensor-parallel degree {self.degree}")
        return n // self.degree

    def kv_heads(self, kv_heads: int) -> int:
        """K/V heads per rank: ``kv_heads / degree``, or one when the degree exceeds them -- each
        head replicated on ``degree / kv_heads`` ranks, as NxD's KV replication
        (``kv_size_multiplier`` of ``GQAQKVColumnParallelLinear``) does."""
        if kv_heads >= self.degree:
            return self.divide(kv_heads, "num_key_value_heads")
        if self.degree % kv_heads:
            raise ValueError(f"the tensor-parallel degree {self.degree} is not a multiple of num_key_value_heads "
                             f"({kv_heads}); K/V heads cannot be replicated evenly")
        return 1


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def tensor_parallel_rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _issue(collective, *tensors, **kwargs) -> None:
    """Issue a ``torch.distributed`` collective on ``tensors``, awaited.

    Under a selective recomputation (``Remat`` saving names) c10d calls bypass the dispatcher
    that the checkpoint saves and replays ops through. A collective in a saved region is then
    not issued again when the layer is recomputed: the region's ops hand back what the forward
    saved, its output buffer included. That holds for data-free (timing-only) tensors, which a
    collective leaves untouched; with values the collective writes into a buffer the checkpoint
    saved, which it refuses, so that combination raises."""
    if saving():
        if not has_data_free(host_tensors(tensors)[0]):
            raise NotImplementedError("selective recomputation (Remat saving names) of tensor-parallel layers runs "
                                      "on data-free tensors only (timing-only mode); use Remat() or no Remat "
                                      "with values")
        if replaying_saved():
            return
    collective(*tensors, **kwargs)


def _all_reduce(x, op=dist.ReduceOp.SUM):
    if _world() > 1:
        _issue(dist.all_reduce, x, op=op)
    return x


def _seq_first(x):
    """[batch, seq, ...] -> contiguous [seq, batch, ...] (a view at batch 1)."""
    return x.movedim(1, 0).contiguous()


def _gather_seq(x):
    """All-gather the sequence dimension (1) of a batch-first tensor."""
    world = _world()
    if world == 1:
        return x
    local = _seq_first(x)
    out = local.new_empty((local.shape[0] * world, *local.shape[1:]))
    _issue(dist.all_gather_single, out, local)
    return out.movedim(0, 1)


def _scatter_seq(x):
    """Reduce-scatter the sequence dimension (1) of a batch-first tensor."""
    world = _world()
    if world == 1:
        return x
    full = _seq_first(x)
    if full.shape[0] % world:
        raise ValueError(f"sequence parallelism splits {full.shape[0]} tokens {world} ways; they must divide")
    out = full.new_empty((full.shape[0] // world, *full.shape[1:]))
    _issue(dist.reduce_scatter_single, out, full)
    return out.movedim(0, 1)


class _CopyToTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad)


class _ReduceFromTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _all_reduce(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class _ReduceScatterToSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _scatter_seq(x)

    @staticmethod
    def backward(ctx, grad):
        return _gather_seq(grad)


class _SequenceParallelLinear(torch.autograd.Function):
    """``gather(x) @ weight^T`` keeping only the 1/TP input shard for backward: backward gathers
    it again for the weight gradient and reduce-scatters the input gradient (NxD's
    ``LinearWithAsyncCommunication`` under sequence parallelism)."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return F.linear(_gather_seq(x), weight)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        total = _gather_seq(x)
        grad_input = _scatter_seq(grad.matmul(weight))
        grad_weight = grad.reshape(-1, grad.shape[-1]).t().matmul(total.reshape(-1, total.shape[-1]))
        return grad_input, grad_weight


class _GatherFromTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        world = _world()
        if world == 1:
            return x
        out = x.new_empty((world, *x.shape))
        _issue(dist.all_gather_single, out, x.contiguous())
        return out.movedim(0, -2).reshape(*x.shape[:-1], world * x.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        world = _world()
        if world == 1:
            return grad
        local = grad.shape[-1] // world
        return grad[..., tensor_parallel_rank() * local:(tensor_parallel_rank() + 1) * local].contiguous()


def gather_from_tensor_parallel_region(x):
    """All-gather the last dimension over the TP group (NxD's ``gather_from_tensor_model_parallel_region``:
    e.g. vocab-parallel logits into whole-vocabulary logits for sampling)."""
    return _GatherFromTensorParallel.apply(x)


def _shard(out_features: int, in_features: int, dtype, device) -> nn.Parameter:
    """A linear layer's weight shard, initialised as ``nn.Linear`` initialises its weight."""
    weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))
    nn.init.kaiming_uniform_(weight, a=5 ** 0.5)
    return weight


def _leave_region(y, sequence_parallel: bool):
    """Leave the TP region: all-reduce the partial sums, or reduce-scatter them by token."""
    return _ReduceScatterToSequenceParallel.apply(y) if sequence_parallel else _ReduceFromTensorParallel.apply(y)


class ColumnParallelLinear(nn.Module):
    """``y = x @ W^T`` with this rank's rows of W (``out_features / degree`` outputs), no bias;
    the output stays split (NxD's ``gather_output=False``). ``sequence_parallel``: ``x`` holds
    1/TP of the tokens and is all-gathered first."""

    def __init__(self, in_features: int, out_features: int, tp: TensorParallel, dtype=None, device=None):
        super().__init__()
        self.in_features, self.out_features = in_features, tp.divide(out_features, "out_features")
        self.sequence_parallel = tp.sequence_parallel
        self.weight = _shard(self.out_features, in_features, dtype, device)

    def forward(self, x):
        if self.sequence_parallel:
            return _SequenceParallelLinear.apply(x, self.weight)
        return F.linear(_CopyToTensorParallel.apply(x), self.weight)


class RowParallelLinear(nn.Module):
    """``y = x @ W^T`` with this rank's columns of W (``in_features / degree`` inputs, the input
    already split, NxD's ``input_is_parallel=True``), the partial sums all-reduced -- or, with
    ``sequence_parallel``, reduce-scattered by token."""

    def __init__(self, in_features: int, out_features: int, tp: TensorParallel, dtype=None, device=None):
        super().__init__()
        self.in_features, self.out_features = tp.divide(in_features, "in_features"), out_features
        self.sequence_parallel = tp.sequence_parallel
        self.weight = _shard(out_features, self.in_features, dtype, device)

    def forward(self, x):
        y = F.linear(x, self.weight)
        return _leave_region(y, self.sequence_parallel)


class ParallelEmbedding(nn.Module):
    """A vocab-parallel embedding (NxD's ``ParallelEmbedding``): this rank's ``vocab / degree``
    rows; ids outside them look up row 0 and are zeroed, the partial embeddings all-reduced (with
    ``sequence_parallel``, reduce-scattered by token)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, tp: TensorParallel, dtype=None, device=None):
        super().__init__()
        self.num_embeddings = tp.divide(num_embeddings, "vocab_size")
        self.sequence_parallel = tp.sequence_parallel
        self.weight = nn.Parameter(torch.empty(self.num_embeddings, embedding_dim, dtype=dtype, device=device))
        nn.init.normal_(self.weight)                            # nn.Embedding's initialisation

    def forward(self, ids):
        if _world() == 1:
            out = F.embedding(ids, self.weight)
        else:
            start = tensor_parallel_rank() * self.num_embeddings
            outside = (ids < start) | (ids >= start + self.num_embeddings)
            out = F.embedding((ids - start).masked_fill(outside, 0), self.weight).masked_fill(outside[..., None], 0.0)
        return _leave_region(out, self.sequence_parallel)


class _ParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target):
        logits_max = _all_reduce(torch.max(logits, dim=-1)[0], dist.ReduceOp.MAX)
        logits.sub_(logits_max.unsqueeze(dim=-1))
        start = tensor_parallel_rank() * logits.shape[-1]
        target_mask = (target >= start) & (target < start + logits.shape[-1])
        masked_target = torch.mul(target.clone() - start, target_mask.long())
        rows = torch.arange(logits.shape[0], device=logits.device)
        predicted = _all_reduce(torch.mul(logits[rows, masked_target].clone(), target_mask.float()))
        exp_logits = torch.exp(logits)
        sum_exp_logits = _all_reduce(exp_logits.sum(dim=-1))
        loss = torch.log(sum_exp_logits) - predicted
        exp_logits.div_(sum_exp_logits.unsqueeze(dim=-1))
        ctx.save_for_backward(exp_logits, target_mask, masked_target)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target_mask, masked_target = ctx.saved_tensors
        rows = torch.arange(softmax.shape[0], device=softmax.device)
        softmax[rows, masked_target] -= target_mask.float()
        softmax.mul_(grad_output.unsqueeze(dim=-1))
        return softmax, None


def parallel_cross_entropy(logits, target):
    """NxD's vocab-parallel cross-entropy (src/neuronx_distributed/parallel_layers/loss_functions.py,
    ``_ParallelCrossEntropy``, Megatron's): the max, the target logit and the softmax denominator
    each all-reduced over the TP group, the softmax kept for backward (``exp_logits.div_(sum)``),
    whose gradient is the softmax less one at the target, scaled in place. ``logits``: this rank's
    [tokens, vocab/TP] shard (overwritten, as NxD's); ``target``: int64 [tokens]. Returns the
    per-token loss."""
    return _ParallelCrossEntropy.apply(logits, target)
