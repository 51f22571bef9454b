"""TPU rows of the fidelity table: MaxText's published training throughput per chip, against
the TPU cost model (``backend.sim.tpu``) fed the op records of the shared Llama
(``wb.models.Llama``, the named configuration) run data-free on ``neuron``, grouped into XLA-style
fusions by the TPU timeline.

Published figures: MaxText's optimized-model tiering table
(github.com/AI-Hypercomputer/maxtext docs/reference/models/tiering.md, "Trillium (v6e)", Gold):
Llama 3.1 8B on 256 chips, BF16, SL=8192: 45.46% MFU, ~7,207 tokens/s/device; Llama 2 70B on 256
chips, BF16, SL=4096: 43.8% MFU, ~900 tokens/s/device. The published time per sequence per chip
is ``SL / (tokens/s/device)``. The prediction is one chip's step over the recipe's per-device
batch, divided by it (``RECIPE_BATCH``), a full training step -- forward, input and weight gradients, AdamW -- with the rematerialisation the
published recipes configure (``REMAT``, PyTorch's selective activation checkpointing by named
value, from MaxText's v6e benchmark configs
``benchmarks/maxtext_trillium_model_configs.py``: ``llama3_1_8b_8192`` remat_policy "custom",
decoder-layer input and q/k/v/out projections offloaded to host, everything else recomputed;
``llama2_70b_4096_optimized`` "qkv_proj_offloaded"). The tiering page does not say which config
produced its figure: ASSUMPTION that it is these. The host offload traffic itself is not costed:
about 235 MB a layer each way for Llama-3.1-8B at SL=8192, ~3.7 ms over the 64 GB/s host link
against ~20 ms of compute a layer, which XLA's async offload hides.
Attention is costed as the recipes' splash-attention kernels (``backend.sim.tpu.attention``) at
the block sizes each recipe sets (``RECIPE_KERNELS``); v6e's 256-wide MXU pads head_dim 128.
FSDP weight all-gathers are hidden (the recipes fuse them into compute, ``CF_FOR_ALL_GATHER``); the
gradient reduce-scatter over the ICI is added to the step unless the recipe offloads it to the
SparseCores (``backend.sim.tpu.collectives``): the 8B recipe does, the 70B one does not. For the 70B
that is 1.71 GB of bf16 gradients a layer, ~4.3 ms over the ICI against ~88 ms of compute.
The band varies the TPU preset's ASSUMPTION fields (``backend.sim.sensitivity``).
"""
from __future__ import annotations

import gc
from collections.abc import Callable

import torch
import torch.nn.functional as F

from backend.sim.presets import derive
from backend.sim.tpu import TpuSession, get_tpu
from backend.sim.tpu.collectives import exposed_gradient_reduction_ns
from backend.sim.tpu.presets import TpuConfig
from benchmarks.fidelity.cases import Built, Case
from benchmarks.fidelity.models import per_layer_replay
from workbench.models import Llama, LlamaConfig, Remat, llama_config
from workbench.session import profile

__all__ = ["TPU_CASES", "tpu_rows", "full_step_workload", "tpu_ns", "TIERING", "REMAT", "RECIPE_KERNELS",
           "RECIPE_BATCH"]

CHIPS = 256             # the published runs: v6e-256, FSDP over every chip
TIERING = "github.com/AI-Hypercomputer/maxtext docs/reference/models/tiering.md (Trillium v6e, Gold)"
# Each published recipe's remat policy as the names it saves (offloads) of each decoder layer;
# everything else is recomputed from the layer's input in backward (``wb.models.Remat``).
REMAT = {"custom: decoder input + q/k/v/out proj offloaded":
         Remat({"query_proj", "key_proj", "value_proj", "out_proj"}),
         "qkv_proj_offloaded": Remat({"query_proj", "key_proj", "value_proj"})}
RECIPES = "github.com/AI-Hypercomputer/maxtext benchmarks/maxtext_trillium_model_configs.py"
# The splash-attention settings each recipe sets (the rest are MaxText's defaults, the preset's).
RECIPE_KERNELS = {
    "Llama-3.1-8B": TpuConfig.cited(
        "v6e", **{f: (2048, f"{RECIPES} llama3_1_8b_8192: sa_block_{p} 2048") for f, p in (
            ("attention_block_q", "q"), ("attention_block_kv", "kv"), ("attention_block_q_bwd", "q_dkv, q_dq"),
            ("attention_block_kv_bwd", "kv_dkv, kv_dq"))},
        attention_fused_backward=(True, f"{RECIPES} llama3_1_8b_8192: sa_use_fused_bwd_kernel True"),
        gradient_reduction_on_sparsecore=(True, f"{RECIPES} llama3_1_8b_8192: xla_flags "
                                                "ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE")),
    "Llama-2-70B": TpuConfig.cited(
        "v6e", attention_block_q=(1024, f"{RECIPES} llama2_70b_4096_optimized: sa_block_q 1024"),
        attention_block_q_bwd=(2048, f"{RECIPES} llama2_70b_4096_optimized: sa_block_q_dkv, sa_block_q_dq 2048")),
}
# Sequences each chip runs per step (the recipes' per_device_batch_size): the step's fixed costs,
# the gradient reduction among them, are shared by that many sequences.
RECIPE_BATCH = {"Llama-3.1-8B": 4, "Llama-2-70B": 2}
# ASSUMPTION (2..4): the gradients reduce-scatter in bf16, as the transpose of the bf16 weight
# all-gather (MaxText casts its fp32 weights to bf16 on the shard); fp32 would double the time.
GRAD_BYTES = 2


def full_step_workload(config: LlamaConfig, seq: int, batch: int, remat: Remat | None, fsdp: int = 1,
                       target: TpuConfig | str = "v6e") -> list:
    """The TPU session's kept workload (``tpu_ns`` replays it) of one full training step of the shared Llama (``config``'s layers), run on
    ``neuron`` data-free and timed for the TPU: forward and backward under ``remat``, then fused
    AdamW over this chip's ``1/fsdp`` shard of every parameter (FSDP shards weights and optimizer
    state over the chips, so each updates only its own rows). The model's tensors live on the
    ``neuron`` device, whose HBM books would count them against a NeuronCore's; a what-if core
    with room for them (``_HOLDS_ANY_STEP``) keeps that bookkeeping out of the TPU's way."""
    previous = torch.neuron.get_target()
    torch.neuron.set_target(_HOLDS_ANY_STEP)
    try:
        return _full_step_records(config, seq, batch, remat, fsdp, target)
    finally:
        gc.collect()
        torch.neuron.set_target(previous)


_HOLDS_ANY_STEP = derive("trn2", name="trn2-holds-tpu-steps", hbm_bytes=2**40)


def _full_step_records(config, seq, batch, remat, fsdp, target) -> list:
    with torch.device("neuron"), torch.neuron.timing_only():
        model = Llama(config, remat=remat, dtype=torch.bfloat16)
        ids = torch.randint(0, config.vocab_size, (batch, seq))
        shards = [torch.empty(-(-p.shape[0] // fsdp), *p.shape[1:], dtype=p.dtype) for p in model.parameters()]
        for shard in shards:
            shard.grad = torch.empty_like(shard)
        optimizer = torch.optim.AdamW(shards, lr=1e-4, fused=True)
        optimizer.step()                           # creates the moments: not part of a steady step
        with profile(device="tpu", target=target, source=False) as prof:
            logits = model(ids)
            F.cross_entropy(logits.view(-1, config.vocab_size), ids.view(-1)).backward()
            optimizer.step()
    return prof.workload


def tpu_ns(workload: list, target: TpuConfig | str) -> float:
    """Simulated time on the TPU ``target`` of a kept workload (a profile's ``(method, args,
    kwargs)`` calls into its ``TpuSession``), XLA-style fusions as the compiled program runs."""
    session = TpuSession(get_tpu(target))
    for method, args, kwargs in workload:
        getattr(session, method)(*args, **kwargs)
    return session.trace.total_time_ns


def _per_sequence(config: LlamaConfig, seq: int, batch: int, remat: Remat) -> Callable[[], Built]:
    """The builder of ``run(target) -> ns`` of one sequence: the chip's step (layers extrapolated
    from 1 and 2, plus the exposed FSDP gradient reduction) over the step's ``batch`` sequences."""

    def build() -> Built:
        one, two = (full_step_workload(config.replace(num_hidden_layers=n), seq, batch, remat, CHIPS)
                    for n in (1, 2))
        layer_stack = per_layer_replay(one, two, config.num_hidden_layers, cost=tpu_ns)
        grad_bytes = GRAD_BYTES * config.num_parameters

        def run(target: TpuConfig) -> float:
            return (layer_stack(target) + exposed_gradient_reduction_ns(target, grad_bytes, CHIPS)) / batch

        return Built(run, RECIPE_KERNELS[config.name],
                     f"the shared Llama ({config.name}) run data-free on neuron, timed by the TPU cost model "
                     f"(XLA-style fusions), {config.num_hidden_layers} layers from 1 and 2 ({len(two)} ops at 2)")

    return build


def _tpu_case(name: str, seq: int, tokens_per_s: float, mfu: str, policy: str) -> Case:
    config, batch, remat = llama_config(name), RECIPE_BATCH[name], REMAT[policy]
    reduction = ("overlapped (SparseCore offload)" if RECIPE_KERNELS[name].gradient_reduction_on_sparsecore
                 else "exposed (the recipe offloads none to the SparseCores)")
    return Case(f"{name} training, one SL={seq} sequence per chip (v6e-256, bf16)", seq / tokens_per_s * 1e9,
                f"{TIERING}: {tokens_per_s:,.0f} tokens/s/device, {mfu} MFU; published = SL / tokens/s",
                {"model": f"wb.models.Llama {name}", "seq": seq, "per-chip batch": f"{batch} (the recipe's)",
                 "dtype": "bf16", "hardware": "v6e-256, FSDP over 256 chips",
                 "remat": f"{policy}: saves {', '.join(sorted(remat.saved))}, recomputes the rest",
                 "optimizer": f"AdamW on the 1/{CHIPS} FSDP shard",
                 "gradient reduce-scatter": f"bf16 over the ICI, {reduction}",
                 "weight all-gathers and host offload traffic": "hidden",
                 "attention": "splash attention at the recipe's block sizes",
                 "prediction": f"one chip's step over the recipe's {batch} sequences / {batch}; band over the TPU "
                               "preset's assumptions"},
                _per_sequence(config, seq, batch, remat))


TPU_CASES = (
    _tpu_case("Llama-3.1-8B", 8192, 7207.0, "45.46%", "custom: decoder input + q/k/v/out proj offloaded"),
    _tpu_case("Llama-2-70B", 4096, 900.0, "43.8%", "qkv_proj_offloaded"),
)


def tpu_rows() -> list:
    from benchmarks.fidelity.table import Row

    return [case.row() for case in TPU_CASES] + [
        Row("MaxText 32B-param model training (1x v5e-256, bf16)", None, None,
            note="not run: MaxText's configs/v5e README publishes 132 TFLOP/s/chip (66.86% MFU) but no "
                 "stored page prints the 32B model's layers and widths, and its 256-chip step needs the "
                 "scale-out model")]
