"""The tensor-parallel Llama step that the multi-chip fidelity rows time: rank 0 of a fake world
running the shared Llama (``wb.models.Llama``) built as a NeuronX Distributed user builds it.

One process becomes rank 0 of the job's world (``workbench.distributed.fake_world``: PyTorch's
fake process group, no values exchanged) and runs, in timing-only mode on ``neuron``, its shard
of ``Llama(config, tensor_parallel=TensorParallel(TP, ...))``: the vocab-parallel embedding,
column-parallel q/k/v and gate/up, row-parallel o and down, the vocab-parallel ``lm_head``, with
Megatron's collectives issued by those layers (``workbench.models.tensor_parallel``). Training
is the user's forward, NxD's vocab-parallel cross-entropy and backward; decode is one step of
the model against its static KV cache, the logits gathered for greedy sampling.

Ranks are NeuronCores and trn1.32xlarge has two per chip, so a TP32 group is one instance: the
collectives are priced on the trn1.32xlarge preset seen per core (``core_topology``): 32
devices per node, each with its chip's link bandwidth (``backend.sim.topology.per_core``). Deep
models are extrapolated from one and two layers as in ``models``; the band varies the compute
assumptions (``time_band``) and the topology's assumed step latencies.
"""
from __future__ import annotations

from backend.sim.topology import Topology, per_core
from workbench.models import llama_config

__all__ = ["core_topology", "tp_llama_records", "TP", "TRN1_CORES_PER_CHIP", "LLAMA_3_1_8B"]

LLAMA_3_1_8B = llama_config("Llama-3.1-8B")

TRN1_CORES_PER_CHIP = 2         # shared/hardware.md Scale-out table: 16 Trainium, 32 cores
TP = 32                         # the published rows: TP32 over one trn1.32xlarge


def core_topology(name: str = "trn1.32xlarge", cores_per_chip: int = TRN1_CORES_PER_CHIP, **changes) -> Topology:
    """The chip topology seen by NeuronCore ranks (``backend.sim.topology.per_core``)."""
    return per_core(name, cores_per_chip, **changes)


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




def _standard_mixed_precision(model) -> None:
    """NxD's Standard Mixed Precision as its ZeRO-1 recipes turn it on (awsdocs-neuron
    libraries/neuronx-distributed/standard_mixed_precision: "Use FP32 for precision sensitive
    operators", "Use FP32 in local gradients accumulation"): the RMSNorms in fp32 with fp32
    weights (``LlamaRMSNorm`` then scales in fp32 and returns bf16, as NxD's) and each gradient
    accumulated into fp32 (``_accumulate_grads_in_fp32``). The linear weights stay bf16 (the
    recipe's config.json: ``"torch_dtype": "bfloat16"``; the fp32 master weights live in the
    ZeRO-1 optimizer), so no per-micro-batch weight cast is paid."""
    import torch

    from workbench.models.llama import LlamaRMSNorm

    for module in model.modules():
        if isinstance(module, LlamaRMSNorm):
            module.to(torch.float32)
    _accumulate_grads_in_fp32(model.parameters())


def _lay_out_linear_weights(model) -> None:
    """Each linear weight stored [in, out] once at load time, as transformers-neuronx's
    ``to_neuron`` does (``add_parameter(mlp.gate_proj.weight.T, ...)``): the parameter keeps its
    [out, in] shape, its storage is the transpose, so ``x @ W^T`` reads a contiguous operand."""
    import torch

    from workbench.models.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    for module in model.modules():
        if isinstance(module, (ColumnParallelLinear, RowParallelLinear)):
            module.weight = torch.nn.Parameter(module.weight.detach().t().contiguous().t(), requires_grad=False)


def tp_llama_records(layers: int, *, mode: str, tp: int = TP, seq: int = 8192, batch: int = 1,
                     context: int = 0, target: str = "trn1", sequence_parallel: bool = False,
                     selective_checkpoint: bool = False, standard_mixed_precision: bool = False,
                     model: str = "Llama-3.1-8B", **config_changes) -> list:
    """Rank 0's op records for a ``layers``-deep ``model`` (a name in ``LLAMA_CONFIGS``;
    ``config_changes``: other ``LlamaConfig`` fields) built as a TP shard of ``tp`` ranks, in
    timing-only mode.

    mode "train": one sequence-batch forward and backward (``batch`` x ``seq`` tokens, weight
    gradients included), the model built as NxD's Llama training recipe builds it
    (examples/training/llama/modeling_llama_nxd.py with tp_zero1_llama3_8B_hf_pretrain.sh: q/k/v
    fused by ``GQAQKVColumnParallelLinear``, gate/up fused, K/V heads replicated up to one per
    rank), ``sequence_parallel`` as its ``--sequence_parallel_enabled``; ``selective_checkpoint``:
    selective activation checkpointing (Korthikanti et al. 2022) as NxD's Llama applies it, the
    core attention and the SwiGLU activation recomputed in backward (``Remat`` saving every other
    named value; modeling_llama_nxd.py ``LlamaMLP``: "We checkpoint the MLP compute too, since we
    see extra data movement which is more expensive than the recompute in this case");
    ``standard_mixed_precision``: ``_standard_mixed_precision``. The loss is NxD's
    ``LlamaForCausalLM``'s: fp32 logits, shifted (``logits[..., :-1, :].contiguous()``), the
    vocab-parallel cross-entropy, its mean.

    mode "decode": one token for each of ``batch`` sequences against a static KV cache of
    ``context`` positions (the last one written by this step), as transformers-neuronx runs it:
    weights laid out at load (``_lay_out_linear_weights``), q/k/v and gate/up as separate matmuls
    (its NeuronConfig ``fuse_qkv`` defaults to False; its Llama loads gate_proj and up_proj as two
    parameters), the vocab-parallel logits all-gathered for greedy sampling."""
    import torch
    import torch.distributed as dist

    from workbench.distributed import fake_world
    from workbench.models import Llama, Remat
    from workbench.models.remat import NAMES
    from workbench.models.tensor_parallel import (TensorParallel, gather_from_tensor_parallel_region,
                                                  parallel_cross_entropy)
    from workbench.session import profile

    if mode not in ("train", "decode"):
        raise ValueError(f"mode must be 'train' or 'decode', got {mode!r}")
    train = mode == "train"
    if not train and (standard_mixed_precision or sequence_parallel or selective_checkpoint):
        raise ValueError("standard_mixed_precision, sequence_parallel and selective_checkpoint are training settings")
    config = llama_config(model).replace(num_hidden_layers=layers, **config_changes)
    fused = dict(fuse_qkv=train, fuse_gate_up=train)
    remat = Remat(NAMES - {"attention", "mlp_act"}) if selective_checkpoint else None
    fake_world(tp, topology="trn1.32xlarge")
    try:
        with torch.device("neuron"), torch.neuron.timing_only():
            llama = Llama(config, dtype=torch.bfloat16, remat=remat,
                          tensor_parallel=TensorParallel(tp, sequence_parallel=sequence_parallel, **fused))
            if train:
                if standard_mixed_precision:
                    _standard_mixed_precision(llama)
                ids = torch.randint(0, config.vocab_size, (batch, seq))
                labels = torch.randint(0, config.vocab_size, (batch * (seq - 1),))
            else:
                llama.requires_grad_(False)
                _lay_out_linear_weights(llama)
                cache = llama.new_cache(max_len=context, batch=batch)
                ids = torch.randint(0, config.vocab_size, (batch, 1))
        with profile(target=target, source=False, timing_only=True) as prof:
            if train:
                logits = llama(ids).float()
                shifted = logits[..., :-1, :].contiguous()
                parallel_cross_entropy(shifted.view(-1, shifted.shape[-1]), labels).mean().backward()
            else:
                with torch.no_grad():
                    logits = llama(ids, cache, start=context - 1)
                    gather_from_tensor_parallel_region(logits[:, -1].float()).argmax(-1)
    finally:
        dist.destroy_process_group()
    return prof.workload
