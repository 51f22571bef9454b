"""TPU rows of the fidelity table: MaxText's published training throughput per chip, against
the TPU cost model (``backend.sim.tpu``) fed the same kind of eager op stream as the Trainium
rows (``workloads``), grouped into XLA-style fusions by the TPU timeline.

Published figures: MaxText's optimized-model tiering table
(github.com/AI-Hypercomputer/maxtext docs/reference/models/tiering.md, "Trillium (v6e)", Gold):
Llama 3.1 8B on 256 chips, BF16, SL=8192: 45.46% MFU, ~7,207 tokens/s/device; Llama 2 70B on 256
chips, BF16, SL=4096: 43.8% MFU, ~900 tokens/s/device. The published time per sequence per chip
is ``SL / (tokens/s/device)``. The prediction is one chip's step over the recipe's per-device
batch, divided by it (``RECIPE_BATCH``), a full training step -- forward, input and weight gradients, AdamW -- with the rematerialisation the
published recipes configure (``REMAT``, from MaxText's v6e benchmark configs
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

from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.tpu import TpuSession, get_tpu
from backend.sim.tpu.collectives import exposed_gradient_reduction_ns
from backend.sim.tpu.presets import TpuConfig
from benchmarks.op_streams import OpStream
from benchmarks.fidelity.workloads import LLAMA_8B, REMAT_PARTS, lora_llama_step, per_layer_replay

__all__ = ["tpu_rows", "full_llama_step", "tpu_ns", "LLAMA2_70B", "TIERING", "REMAT", "RECIPE_KERNELS"]

CHIPS = 256             # the published runs: v6e-256, FSDP over every chip
TIERING = "github.com/AI-Hypercomputer/maxtext docs/reference/models/tiering.md (Trillium v6e, Gold)"
LLAMA2_70B = {"layers": 80, "d": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672, "vocab": 32000}
# What each published recipe's remat policy recomputes (the parts of REMAT_PARTS it does not keep).
REMAT = {"custom: decoder input + q/k/v/out proj offloaded": REMAT_PARTS - {"out_proj"},
         "qkv_proj_offloaded": REMAT_PARTS}
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


def _base_weights(cfg: dict) -> list[tuple[int, int]]:
    """(d_out, d_in) of one layer's linears: q, k, v, o, gate, up, down."""
    d, kv = cfg["d"], cfg["kv_heads"] * (cfg["d"] // cfg["heads"])
    return [(d, d), (kv, d), (kv, d), (d, d), (cfg["ffn"], d), (cfg["ffn"], d), (d, cfg["ffn"])]


def _weights(cfg: dict, layers: int) -> list[tuple[int, int]]:
    """(d_out, d_in) of every trained weight: each layer's linears and the LM head."""
    return _base_weights(cfg) * layers + [(cfg["vocab"], cfg["d"])]


def full_llama_step(layers: int, seq: int, batch: int = 1, recompute: frozenset[str] = frozenset(),
                    fsdp: int = 1, **dims) -> list[OpRecord]:
    """A full training step of a Llama block stack: the LoRA stream without adapters (forward,
    ``recompute``'d parts, input gradients), plus each base weight's gradient and AdamW over this
    chip's ``1/fsdp`` shard of every parameter (FSDP shards weights and optimizer state over the
    chips, so each updates only its own rows)."""
    cfg = {**LLAMA_8B, **dims}
    records = list(lora_llama_step(layers, seq=seq, batch=batch, rank=0, recompute=recompute, **dims))
    s, tokens = OpStream("bfloat16"), batch * seq
    weights = _weights(cfg, layers)
    for d_out, d_in in weights:           # dW = g^T @ x, one per linear
        s.op("aten::mm", [s.view(s.t(tokens, d_out), d_out, tokens, strides=(1, d_out)), s.t(tokens, d_in)],
             [s.t(d_out, d_in)])
    params = [s.t(-(-d_out // fsdp), d_in) for d_out, d_in in weights]
    steps = [TensorDesc((), "float32") for _ in params]
    s.op("aten::_fused_adamw_", [*params, *params, *params, *params, *steps], [], lr=1e-4, beta1=0.9,
         beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    return records + s.records


def tpu_ns(records: list[OpRecord], target: str) -> float:
    """Simulated time of ``records`` on the TPU ``target`` (compiled, XLA-style fusions)."""
    session = TpuSession(get_tpu(target))
    for record in records:
        session.feed(record)
    return session.trace.total_time_ns


def _per_sequence(step: dict, seq: int, layers: int, cfg: dict):
    """``run(target) -> ns`` of one sequence: the chip's step (layers extrapolated from 1 and 2,
    plus the exposed FSDP gradient reduction) over the step's ``batch`` sequences."""
    layer_stack = per_layer_replay(full_llama_step(1, seq, **step), full_llama_step(2, seq, **step), layers,
                                   cost=tpu_ns)
    grad_bytes = GRAD_BYTES * sum(d_out * d_in for d_out, d_in in _weights(cfg, layers))

    def run(target: TpuConfig) -> float:
        return (layer_stack(target) + exposed_gradient_reduction_ns(target, grad_bytes, CHIPS)) / step["batch"]

    return run


def tpu_rows() -> list:
    from benchmarks.fidelity.table import Row, _timed

    rows = []
    for name, dims, seq, tokens_per_s, mfu, policy in (
            ("Llama-3.1-8B", {}, 8192, 7207.0, "45.46%", "custom: decoder input + q/k/v/out proj offloaded"),
            ("Llama-2-70B", {k: v for k, v in LLAMA2_70B.items() if k != "layers"}, 4096, 900.0, "43.8%",
             "qkv_proj_offloaded")):
        layers, batch = (LLAMA2_70B if dims else LLAMA_8B)["layers"], RECIPE_BATCH[name]
        published_ns = seq / tokens_per_s * 1e9
        step = dict(recompute=REMAT[policy], fsdp=CHIPS, batch=batch, **dims)
        reduction = ("overlapped (SparseCore offload)" if RECIPE_KERNELS[name].gradient_reduction_on_sparsecore
                     else "exposed (the recipe offloads none to the SparseCores)")
        rows.append(_timed(f"{name} training, one SL={seq} sequence per chip (v6e-256, bf16)",
                           _per_sequence(step, seq, layers, {**LLAMA_8B, **dims}), RECIPE_KERNELS[name],
                           published_ns,
                           f"{TIERING}: {tokens_per_s:,.0f} tokens/s/device, {mfu} MFU; published = SL / tokens/s; "
                           f"predicted: one chip's step over the recipe's {batch} sequences / {batch}, full step "
                           f"with the recipe's remat ({policy}: recomputes {', '.join(sorted(REMAT[policy]))}), "
                           f"AdamW on its 1/{CHIPS} FSDP shard, the bf16 gradient reduce-scatter over the ICI "
                           f"{reduction}, "
                           f"weight all-gathers and host offload traffic hidden, splash attention at the recipe's "
                           f"block sizes, {layers} layers from 1 and 2; band over the TPU preset's assumptions"))
    rows.append(Row("MaxText 32B-param model training (1x v5e-256, bf16)", None, None,
                    note="not run: MaxText's configs/v5e README publishes 132 TFLOP/s/chip (66.86% MFU) but no "
                         "stored page prints the 32B model's layers and widths, and its 256-chip step needs the "
                         "scale-out model"))
    return rows
