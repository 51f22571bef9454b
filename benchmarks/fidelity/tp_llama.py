"""The tensor-parallel Llama step that the multi-chip fidelity rows time: rank 0 of a fake world running a Megatron shard.

One process becomes rank 0 of the job's world (``workbench.distributed.fake_world``: PyTorch's
fake process group, no values exchanged) and runs, in timing-only mode on ``neuron``, the layers
of its tensor-parallel shard the way Megatron-LM (and NeuronX Distributed) cut them: the q/k/v
and gate/up projections column-parallel, the attention output and down projections
row-parallel, with Megatron's two conjugate collectives per block -- an all_reduce of the
activations after each row-parallel linear in the forward pass, and of the input gradient
before each column-parallel linear in the backward pass (with sequence parallelism, as the
published training recipe uses, each all_reduce becomes a reduce_scatter and an all_gather and
RMSNorm and the residual adds run on 1/TP of the tokens). The shard is built explicitly (shapes
divided by the TP degree) and the collectives are issued with ``torch.distributed`` calls:
DTensor's ``parallelize_module`` is not used here. Grouped-query K/V heads are replicated up to
one per rank, as NeuronX Distributed's KV replication does when TP exceeds the KV heads.

Ranks are NeuronCores and trn1.32xlarge has two per chip, so a TP32 group is one instance: the
collectives are priced on the trn1.32xlarge preset seen per core (``core_topology``): 32
devices per node, each with its chip's link bandwidth (``backend.sim.topology.per_core``). Deep models are extrapolated from one and two layers as in ``models``; the band
varies the compute assumptions (``time_band``) and the topology's assumed step latencies.
"""
from __future__ import annotations

from backend.sim.topology import Topology, per_core
from workbench.models import llama_config

__all__ = ["core_topology", "tp_llama_records", "TP", "TRN1_CORES_PER_CHIP", "HEAD_DIM", "LLAMA_8B"]

_LLAMA_3_1_8B = llama_config("Llama-3.1-8B")
# The shard builders' widths, from the shared configuration.
LLAMA_8B = {"layers": _LLAMA_3_1_8B.num_hidden_layers, "d": _LLAMA_3_1_8B.hidden_size,
            "heads": _LLAMA_3_1_8B.num_attention_heads, "kv_heads": _LLAMA_3_1_8B.num_key_value_heads,
            "ffn": _LLAMA_3_1_8B.intermediate_size, "vocab": _LLAMA_3_1_8B.vocab_size}

TRN1_CORES_PER_CHIP = 2         # shared/hardware.md Scale-out table: 16 Trainium, 32 cores
TP = 32                         # the published rows: TP32 over one trn1.32xlarge


def core_topology(name: str = "trn1.32xlarge", cores_per_chip: int = TRN1_CORES_PER_CHIP, **changes) -> Topology:
    """The chip topology seen by NeuronCore ranks (``backend.sim.topology.per_core``)."""
    return per_core(name, cores_per_chip, **changes)


def _megatron_functions(sequence_parallel: bool = False):
    """Megatron's tensor-parallel region as (column_linear, leave): ``column_linear(x, w)`` enters
    the region and multiplies by a column-parallel weight shard, ``leave`` follows a row-parallel one.

    Plain TP: copy-to-TP (identity forward, all_reduce backward) and reduce-from-TP (all_reduce
    forward, identity backward). Sequence parallel (Korthikanti et al. 2022, "Reducing Activation
    Recomputation in Large Transformer Models"): outside the TP region each rank keeps 1/TP of
    the tokens, so entering all-gathers the sequence (reduce-scatter backward) and leaving
    reduce-scatters it (all-gather backward) -- the same bytes on the links as one all_reduce,
    while RMSNorm and the residual adds run on 1/TP of the rows. The column-parallel linear keeps
    only its 1/TP input shard for backward and all-gathers it again there for the weight gradient,
    as NxD's ``LinearWithAsyncCommunication`` and ``GQAQKVLinearWithAsyncCommunication`` do
    (src/neuronx_distributed/parallel_layers/layers.py, modules/qkv_linear.py: ``ctx.save_for_
    backward(input, weight)`` and, in backward, ``total_input = xm.all_gather(input, ...)``).
    Every collective here is awaited where it is issued, as NxD's sequence-parallel backward issues
    them: unlike Megatron-LM's ``LinearWithGradAccumulationAndAsyncCommunication`` (``async_op=True``
    all-gather under the grad_input matmul, then reduce-scatter under the weight-gradient matmul),
    NxD's ``LinearWithAsyncCommunication.backward`` sets ``handle = None``, gathers with
    ``xm.all_gather`` and reduce-scatters with ``xm.reduce_scatter`` (lazy torch_xla ops, no Work
    handle; ``assert not ctx.async_grad_allreduce`` under sequence parallelism; the only async handle
    is the plain-TP grad all_reduce), and ``GQAQKVLinearWithAsyncCommunication`` the same (its
    "Asynchronous all-reduce" is a plain ``all_reduce``); the refactored parallel_layers/layers_utils.py
    (``_linear_autograd_base_setup_bwd``, ``_linear_autograd_bwd_input_grad``) keeps that. Any overlap
    is then the compiler's schedule of the graph (awsdocs-neuron neuron-runtime/explore/compute-comm-
    overlap: neuronx-cc places each collective's trigger and wait), which eager ops do not model."""
    import torch
    import torch.distributed as dist

    def gather(x):
        out = x.new_empty((x.shape[0] * dist.get_world_size(), *x.shape[1:]))
        dist.all_gather_single(out, x.contiguous())
        return out

    def scatter(x):
        out = x.new_empty((x.shape[0] // dist.get_world_size(), *x.shape[1:]))
        dist.reduce_scatter_single(out, x.contiguous())
        return out

    def all_reduce(x):
        dist.all_reduce(x)
        return x

    class EnterTP(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            return all_reduce(grad)

    class SequenceParallelColumnLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return gather(x).matmul(w)

        @staticmethod
        def backward(ctx, grad):
            x, w = ctx.saved_tensors
            total = gather(x)
            grad_input = scatter(grad.matmul(w.t()))
            return grad_input, grad.t().matmul(total).t()     # [out, in] as the nn.Linear weight

    forward_out, backward_out = (scatter, gather) if sequence_parallel else (all_reduce, (lambda x: x))

    class LeaveTP(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return forward_out(x)

        @staticmethod
        def backward(ctx, grad):
            return backward_out(grad)

    def column_linear(x, w):
        return SequenceParallelColumnLinear.apply(x, w) if sequence_parallel else EnterTP.apply(x).matmul(w)

    return column_linear, LeaveTP.apply


def _rms(h, w):
    """RMSNorm computed in the norm weight's dtype, returned in the input's: with an fp32 weight this
    is NxD's ``LlamaRMSNorm`` (examples/training/llama/modeling_llama_nxd.py: ``hidden_states.to(
    torch.float32)`` ... ``(self.weight * hidden_states).to(input_dtype)``), an FP32 "precision
    sensitive operator" of Standard Mixed Precision; with a bf16 weight the casts are no-ops."""
    import torch
    x = h.to(w.dtype)
    return (w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))).to(h.dtype)


def _rope(x, cos, sin):
    """Rotary position embedding as NxD's Llama applies it to q and k (src/neuronx_distributed/
    overrides/transformer_overrides.py ``apply_rotary_pos_emb``: ``(q * cos) + (rotate_half(q) *
    sin)``, ``rotate_half`` = ``torch.cat((-x2, x1))`` of the two halves of the head dimension)."""
    import torch
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _swiglu(gate, up):
    import torch.nn.functional as F
    return F.silu(gate) * up


def _flash_attention(q, k, v, causal: bool):
    """The fused (flash) attention op, as the published runs use a flash-attention kernel; on a
    PrivateUse1 device ``F.scaled_dot_product_attention`` would pick the unfused math form."""
    import torch
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=causal)[0]


def _tp_block(x, w, column_linear, tp_out, batch: int, cache=None, selective_checkpoint: bool = False,
              rope=None):
    """One Llama block of a TP rank: RMSNorm, its 1/TP of the heads, SwiGLU over its 1/TP of the
    FFN. ``w``: (qkv, o, gate_up, down, norm1, norm2) shards. ``x`` holds the rows outside the TP
    region (all tokens, or 1/TP of them with sequence parallelism: ``column_linear`` / ``tp_out`` say).
    With ``cache`` (K, V of the whole context, the last position free), one decode step: the new
    K/V land in the cache. ``selective_checkpoint``: selective activation checkpointing (Korthikanti
    et al. 2022) as NxD's Llama applies it -- the core attention keeps no activations and runs
    forward again in backward, and so does the SwiGLU activation (modeling_llama_nxd.py ``LlamaMLP``:
    "We checkpoint the MLP compute too, since we see extra data movement which is more expensive
    than the recompute in this case"). ``rope``: (cos, sin) to rotate q and k with (``_rope``)."""
    from torch.utils.checkpoint import checkpoint

    wqkv, wo, wgu, wd, n1, n2 = w
    qkv = column_linear(_rms(x, n1), wqkv)
    tokens, hd = qkv.shape[0], HEAD_DIM
    q, k, v = qkv.chunk(3, dim=-1)
    q, k, v = (t.reshape(batch, tokens // batch, -1, hd).transpose(1, 2) for t in (q, k, v))
    if rope is not None:
        q, k = _rope(q, *rope), _rope(k, *rope)
    if cache is not None:
        k_cache, v_cache = cache
        k_cache[:, :, -1:].copy_(k)
        v_cache[:, :, -1:].copy_(v)
        k, v = k_cache, v_cache
    if selective_checkpoint:
        attn = checkpoint(_flash_attention, q, k, v, cache is None, use_reentrant=False)
    else:
        attn = _flash_attention(q, k, v, cache is None)
    x = x + tp_out(attn.transpose(1, 2).reshape(tokens, -1).matmul(wo))
    gate, up = column_linear(_rms(x, n2), wgu).chunk(2, dim=-1)
    act = checkpoint(_swiglu, gate, up, use_reentrant=False) if selective_checkpoint else _swiglu(gate, up)
    return x + tp_out(act.matmul(wd))


HEAD_DIM = 128


def _linear_weight(out_features: int, in_features: int, laid_out: bool, **make):
    """The right-hand operand of ``x @ W^T`` for a linear layer's shard: the ``nn.Linear`` weight
    [out, in] used transposed (a view), or, ``laid_out``, stored [in, out] once at load time as
    transformers-neuronx's ``to_neuron`` does (``add_attention_query(q_proj.weight.detach().T)``)."""
    import torch
    if laid_out:
        return torch.empty(in_features, out_features, **make)
    return torch.empty(out_features, in_features, **make).t()


def _shards(tp: int, requires_grad: bool, laid_out: bool = False, norm_dtype=None, **dims):
    """A block's weight shards on ``neuron`` (bf16): heads and FFN split ``tp`` ways, K/V heads
    replicated up to one per rank when ``tp`` exceeds them. The four projections are right-hand
    matmul operands (``_linear_weight``), the two norms vectors (``norm_dtype``, bf16 by default)."""
    import torch

    cfg = {**LLAMA_8B, **dims}
    d, heads, kv, ffn = cfg["d"], cfg["heads"], cfg["kv_heads"], cfg["ffn"]
    local_q, local_kv = max(1, heads // tp), max(1, kv // tp)
    if local_q != local_kv:
        raise ValueError(f"this shard builder keeps one K/V head per query head group of 1; got {local_q} "
                         f"query and {local_kv} K/V heads per rank")
    local_ffn = ffn // tp
    make = dict(device="neuron", dtype=torch.bfloat16, requires_grad=requires_grad)
    return [_linear_weight(3 * local_q * HEAD_DIM, d, laid_out, **make),
            _linear_weight(d, local_q * HEAD_DIM, laid_out, **make),
            _linear_weight(2 * local_ffn, d, laid_out, **make), _linear_weight(d, local_ffn, laid_out, **make),
            *(torch.empty(d, **{**make, "dtype": norm_dtype or torch.bfloat16}) for _ in range(2))]


def _vocab_parallel_cross_entropy(logits, target):
    """NxD's vocab-parallel cross-entropy (src/neuronx_distributed/parallel_layers/loss_functions.py,
    ``_ParallelCrossEntropy``, Megatron's): the max, the target logit and the softmax denominator
    each all-reduced over the TP group, the softmax kept for backward (``exp_logits.div_(sum)``),
    whose gradient is the softmax less one at the target, scaled in place. ``logits``: this rank's
    fp32 [tokens, vocab/TP] shard; ``target``: int64 [tokens]. Returns the per-token loss."""
    import torch
    import torch.distributed as dist

    class ParallelCrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, target):
            logits_max = torch.max(logits, dim=-1)[0]
            dist.all_reduce(logits_max, op=dist.ReduceOp.MAX)
            logits.sub_(logits_max.unsqueeze(dim=-1))
            start = dist.get_rank() * logits.shape[-1]
            target_mask = (target >= start) & (target < start + logits.shape[-1])
            masked_target = torch.mul(target.clone() - start, target_mask.long())
            rows = torch.arange(logits.shape[0], device=logits.device)
            predicted = torch.mul(logits[rows, masked_target].clone(), target_mask.float())
            dist.all_reduce(predicted)
            exp_logits = torch.exp(logits)
            sum_exp_logits = exp_logits.sum(dim=-1)
            dist.all_reduce(sum_exp_logits)
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

    return ParallelCrossEntropy.apply(logits, target)


def _leaf(weight):
    """The parameter behind a weight operand (``_linear_weight`` may hand out a transposed view)."""
    return weight if weight._base is None else weight._base


def _accumulate_grads_in_fp32(params) -> None:
    """Standard Mixed Precision's FP32 local gradient accumulation: NxD's ``use_fp32_grad_acc``
    turns on ``use_grad_acc_hook`` of torch_xla's ``ZeroRedundancyOptimizer``, whose hook, as each
    parameter's gradient is ready in every micro-batch's backward, adds it cast to fp32 into an
    fp32 ``main_grad`` of the parameter's full shape and drops it
    (``shard.main_grad.add_(param.grad.data.to(dtype=self.optimizer_dtype)); param.grad = None``).
    Zeroing ``main_grad`` once per optimizer step (1/32 of the micro-batches) is left out."""
    import torch

    def hook(param, main_grad):
        main_grad.add_(param.grad.to(torch.float32))
        param.grad = None

    for p in params:
        main_grad = torch.empty(p.shape, dtype=torch.float32, device=p.device)
        p.register_post_accumulate_grad_hook(lambda param, main_grad=main_grad: hook(param, main_grad))


def tp_llama_records(layers: int, *, mode: str, tp: int = TP, seq: int = 8192, batch: int = 1,
                     context: int = 0, target: str = "trn1", sequence_parallel: bool = False,
                     selective_checkpoint: bool = False, standard_mixed_precision: bool = False,
                     **dims) -> list:
    """Rank 0's op records for ``layers`` TP-sharded Llama blocks and the vocab-parallel head.

    mode "train": one sequence-batch forward and backward (``batch`` x ``seq`` tokens, weight
    gradients included); mode "decode": one token for each of ``batch`` sequences against a KV
    cache of ``context`` positions. Run in a fake world of ``tp`` ranks in timing-only mode. With
    ``sequence_parallel`` (training) the activations outside the TP region are split by token
    (``_megatron_functions``); with ``selective_checkpoint`` the core attention and the SwiGLU
    activation are checkpointed (``_tp_block``). ``standard_mixed_precision`` (training): NxD's
    Standard Mixed Precision as its ZeRO-1 recipes turn it on (awsdocs-neuron
    libraries/neuronx-distributed/standard_mixed_precision: "Use FP32 for precision sensitive
    operators", "Use FP32 in local gradients accumulation") -- RMSNorm in fp32 with fp32 weights
    (``_rms``) and each gradient accumulated into fp32 (``_accumulate_grads_in_fp32``). The linear
    weights stay bf16 (the recipe's config.json: ``"torch_dtype": "bfloat16"``; the fp32 master
    weights live in the ZeRO-1 optimizer), so no per-micro-batch weight cast is paid."""
    import torch
    import torch.distributed as dist

    from workbench.distributed import fake_world
    from workbench.session import profile

    if mode not in ("train", "decode"):
        raise ValueError(f"mode must be 'train' or 'decode', got {mode!r}")
    cfg = {**LLAMA_8B, **dims}
    column_linear, leave_tp = _megatron_functions(sequence_parallel)
    fake_world(tp, topology="trn1.32xlarge")
    try:
        with profile(target=target, source=False, timing_only=True) as prof:
            train = mode == "train"
            tokens = batch * seq if train else batch
            if sequence_parallel:
                if tokens % tp:
                    raise ValueError(f"sequence parallelism splits {tokens} tokens {tp} ways; they must divide")
                tokens //= tp
            if standard_mixed_precision and not train:
                raise ValueError("standard_mixed_precision is a training setting")
            norm_dtype = torch.float32 if standard_mixed_precision else None
            blocks = [_shards(tp, train, laid_out=not train, norm_dtype=norm_dtype, **dims) for _ in range(layers)]
            head = _linear_weight(cfg["vocab"] // tp, cfg["d"], not train, device="neuron", dtype=torch.bfloat16,
                                  requires_grad=train)
            if standard_mixed_precision:
                _accumulate_grads_in_fp32([_leaf(w) for block in blocks for w in block] + [_leaf(head)])
            x = torch.empty(tokens, cfg["d"], device="neuron", dtype=torch.bfloat16, requires_grad=train)
            h = x
            # cos/sin of the sequence's positions, computed once per forward and shared by the layers
            # (NxD's LlamaModel: ``position_embeddings = self.rotary_emb(...)``; that one-off is left out).
            # The decode step leaves RoPE out (transformers-neuronx's compiled graph fuses it).
            rope = None
            if train:
                rope = tuple(torch.empty(1, 1, seq, HEAD_DIM, device="neuron", dtype=torch.bfloat16) for _ in range(2))
            for w in blocks:
                cache = None
                if not train:
                    shape = (batch, w[1].shape[0] // HEAD_DIM, context, HEAD_DIM)
                    cache = (torch.empty(shape, device="neuron", dtype=torch.bfloat16),
                             torch.empty(shape, device="neuron", dtype=torch.bfloat16))
                h = _tp_block(h, w, column_linear, leave_tp, batch, cache, selective_checkpoint, rope)
            logits = column_linear(_rms(h, blocks[-1][5]), head).float()
            if train:
                # NxD's Llama: ``logits[..., :-1, :].clone()`` for the shifted labels, then the loss.
                target = torch.empty(logits.shape[0] - 1, device="neuron", dtype=torch.long)
                _vocab_parallel_cross_entropy(logits[:-1].clone(), target).sum().backward()
            else:
                gathered = torch.empty(tp * logits.numel(), device="neuron", dtype=logits.dtype)
                dist.all_gather_single(gathered, logits.reshape(-1))
                gathered.reshape(tp, batch, -1).argmax(-1)
    finally:
        dist.destroy_process_group()
    return prof.workload
