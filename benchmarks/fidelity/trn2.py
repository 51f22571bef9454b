"""Whole-model rows on trn2, the default target: the Trn2 results Neuron publishes
(``docs/hardware-sources.md``), built as a user would -- the model's Hugging Face config, the
published TP, batch and lengths, ``wb.serve`` -- and read as p50 TTFT and TPOT.

Each case is data: the published figures, their source and the published configuration. Where
a ratio falls outside 0.8-1.25 the note measures, with the same simulator on the same shard of
the real module, what the published configuration runs that ``wb.serve``'s eager Hugging Face
forward does not: its attention kernel, sequence parallelism (RMSNorm and the residual adds on
1/TP of the prompt's tokens, NxD Inference's ``--sequence-parallel-enabled``), weights laid out
once at load ([in, out], so no per-call transpose of each ``nn.Linear`` weight), its QKV and MLP
kernels' fusion of the elementwise ops, and its bucket padding. Nothing here is tuned per row.

Neuron publishes no trn2 training table (its performance pages cover trn1, trn1n, inf1 and
inf2; the NxD Training trn2 recipes give configurations without results), so every row here
is inference: see ``docs/hardware-sources.md``.

``python -m benchmarks.fidelity.trn2`` prints the rows in the fidelity table's format.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from benchmarks.fidelity.report import IN_RANGE
from benchmarks.fidelity.table import Row, format_table

__all__ = ["Trn2Case", "CASES", "llama_config", "trn2_rows", "main"]

_NXDI_405B = ("NxD Inference tutorial \"Using Speculative Decoding and Quantization to improve Llama-3.1-405B "
              "inference performance on Trn2 instances\", llama405b_perf_comparison.csv, row \"No speculative "
              "decoding\" (aws-neuron/aws-neuron-sdk libraries/nxd-inference/tutorials/, added in ba1c08b0, "
              "SDK 2.21.1 docs, unchanged at 81ce03ae)")


@dataclass(frozen=True)
class Trn2Case:
    """A published trn2 serving result: Llama sizes, the run's TP / batch / lengths, and p50s."""

    name: str
    sizes: dict               # LlamaConfig fields of the published checkpoint
    target: str               # the workbench target the published instance and LNC map to
    tp: int
    batch: int
    prompt: int
    output: int
    ttft_ms: float
    tpot_ms: float
    source: str
    configuration: str        # what the published run set, in its own flags
    prompt_buckets: tuple = ()     # what NxD Inference may have padded the prompt to (its context-encoding bucket)
    decode_bucket: int = 0         # the context every decode step attends over (its token-generation bucket)


CASES = (
    Trn2Case(
        "Llama-3.1-405B TP64 LNC2 b1 10,000/1,500 (trn2.48xlarge)",
        dict(vocab_size=128256, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
             num_attention_heads=128, num_key_value_heads=8, rope_theta=500000.0),
        "trn2/lnc2", 64, 1, 10_000, 1_500, ttft_ms=2442.0, tpot_ms=37.9, source=_NXDI_405B,
        configuration=("bf16 weights, TP64 at LNC=2, batch 1, max context 12,288, seq-len 12,800, bucketing (when the "
                       "figure was published, NxD Inference's default buckets: the prompt runs in the 12,288 "
                       "context-encoding bucket; the page now lists 2048/4096/10240/12288 with the figures unchanged), "
                       "token-generation bucket 12,800; fused QKV, sequence parallel, "
                       "QKV/attention/MLP NKI kernels, on-device sampling; vLLM max-num-seqs 1; LLMPerf 10,000 tokens "
                       "in, 1,500 requested out (1,788 mean generated), one request at a time, 50 requests: TTFT p50 "
                       "2,441.96 ms, inter-token latency p50 37.93 ms"),
        prompt_buckets=(10240, 12288), decode_bucket=12800),
)


def llama_config(case: Trn2Case):
    from transformers import LlamaConfig
    return LlamaConfig(**case.sizes)


def _served(case: Trn2Case) -> dict:
    from benchmarks.fidelity.serving import _served as served
    return served(llama_config(case), case.target, case.tp, case.batch, case.prompt, case.output)


# --- what the published configuration runs that the eager Hugging Face forward does not ----------------

_FUSED = "trn2_fused_causal"


def _fused_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """A prefill's attention as one fused causal op over K/V repeated per query head: what NxD
    Inference's attention kernel runs, whichever path Hugging Face's SDPA call takes on the device
    (its ``enable_gqa`` call goes to the masked math form where the device's SDPA choice wants
    equal head counts)."""
    import torch.nn.functional as F
    groups = query.shape[1] // key.shape[1]
    key, value = (t.repeat_interleave(groups, dim=1) for t in (key, value))
    out = F.scaled_dot_product_attention(query, key, value, is_causal=query.shape[2] > 1, scale=scaling)
    return out.transpose(1, 2), None


def _lay_out_weights(model) -> None:
    """Store every ``nn.Linear`` weight as [in, out] (the module sees its usual [out, in] as a
    transposed view of the same values), as an inference runtime lays weights out once at load."""
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.weight = torch.nn.Parameter(m.weight.detach().t().contiguous().t(), requires_grad=False)


def _forward(case: Trn2Case, layers: int, cached: int, new: int, *, laid_out: bool, fused: bool = False) -> list:
    """The op records of one forward of the case's TP shard (``layers`` deep), timing-only, as
    ``workbench.serving`` measures an iteration, optionally with laid-out weights and
    ``_fused_attention``."""
    import torch
    import workbench as wb
    from transformers import AttentionInterface
    from workbench.serving.kv_slots import slot_cache
    from workbench.serving.model_shapes import build_timing_only, shard_config

    model = build_timing_only(shard_config(llama_config(case), case.tp, layers))
    if fused:
        AttentionInterface.register(_FUSED, _fused_attention)
        model.config._attn_implementation = _FUSED
    with torch.neuron.timing_only(values_up_to=0):
        if laid_out:
            _lay_out_weights(model)
        cache = slot_cache(model.config, case.batch, cached, new, torch.bfloat16)
        ids = torch.zeros(case.batch, new, dtype=torch.long, device="neuron")
    with torch.no_grad(), wb.profile(device="neuron", target=case.target, timing_only=True, source=False) as prof:
        model(ids, past_key_values=cache, logits_to_keep=1)
    return prof.workload


_KERNEL_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::_scaled_dot_product_fused_attention_overrideable")


def _per_layer(case: Trn2Case, cached: int, new: int, *, launches: bool = True, **how) -> dict:
    """A layer (two layers less one): its seconds, the seconds of its ops other than GEMMs and
    fused attention (norms, RoPE, activations, residual adds, casts: ``other_s``), and its GEMMs'
    seconds and HBM bytes. ``launches=False``: with no per-op dispatch cost, as one compiled graph
    (one launch per step) would run the same ops."""
    from backend.lowering.timeline import simulate
    from backend.sim import get_target
    target = get_target(case.target)
    if not launches:
        target = target.derive(launch_overhead_ns=0.0)
    found = []
    for n in (2, 1):
        ops = simulate(_forward(case, n, cached, new, **how), target).ops
        gemms = [op for op in ops if op.name in _KERNEL_OPS[:3]]
        found.append({"s": max(op.end_ns for op in ops) * 1e-9,
                      "other_s": sum(op.time_ns for op in ops if op.name not in _KERNEL_OPS) * 1e-9,
                      "gemm_s": sum(op.time_ns for op in gemms) * 1e-9, "gemm_bytes": sum(op.hbm_bytes for op in gemms)})
    two, one = found
    return {key: two[key] - one[key] for key in two}


def _per_layer_s(case: Trn2Case, cached: int, new: int, **how) -> float:
    return _per_layer(case, cached, new, **how)["s"]


def _outside_tp_region_s(case: Trn2Case, tokens: int) -> float:
    """A layer's ops outside the TP region on ``tokens`` tokens: its two RMSNorms and two residual adds."""
    import torch
    import workbench as wb
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    with torch.device("neuron"), torch.neuron.timing_only(values_up_to=0):
        norm = LlamaRMSNorm(case.sizes["hidden_size"]).to(torch.bfloat16)
        h = torch.empty(case.batch, tokens, case.sizes["hidden_size"], dtype=torch.bfloat16)
    with torch.no_grad(), wb.profile(device="neuron", target=case.target, timing_only=True, source=False) as prof:
        for _ in range(2):
            h = h + norm(h)
    return prof.summary["total_time"]


def _sequence_parallel_saving_s(case: Trn2Case, tokens: int) -> float:
    """What a layer saves when its ops outside the TP region run on 1/TP of the tokens."""
    return _outside_tp_region_s(case, tokens) - _outside_tp_region_s(case, tokens // case.tp)


def _prefill_gap(case: Trn2Case, predicted_s: float) -> str:
    """The TTFT with the published configuration's mechanisms added one at a time, each measured."""
    layers, tokens = case.sizes["num_hidden_layers"], case.prompt
    served = _per_layer_s(case, 0, tokens, laid_out=False)
    fused = _per_layer_s(case, 0, tokens, laid_out=False, fused=True)
    sp = _sequence_parallel_saving_s(case, tokens)
    laid = _per_layer_s(case, 0, tokens, laid_out=True, fused=True)
    taken = "SDPA's masked math form" if fused < 0.99 * served else "the fused op already"
    steps = [(f"attention as one fused causal op per layer, the published attention kernel (the served run "
              f"takes {taken})", layers * (fused - served)),
             (f"sequence parallelism: each layer's two RMSNorms and residual adds on 1/{case.tp} of the tokens",
              -layers * sp),
             ("weights laid out at load", layers * (laid - fused))]
    published = case.ttft_ms * 1e-3
    text, now = [], predicted_s
    for what, change in steps:
        now += change
        text.append(f"{what}: {_delta(change, 0)} -> {now / published:.2f}")
    padded = [layers * (_per_layer_s(case, 0, n, laid_out=True, fused=True) - _sequence_parallel_saving_s(case, n)
                        - laid + sp) for n in case.prompt_buckets]
    if padded:
        text.append(f"the prompt padded to its context-encoding bucket ({'..'.join(map(str, case.prompt_buckets))} "
                    f"tokens): {'..'.join(_delta(p, 0) for p in padded)} -> "
                    + "..".join(f"{(now + p) / published:.2f}" for p in padded))
    return (f"predicted as served: a layer of the shard {served * 1e3:.1f} ms; measured on the same shard, adding "
            "what the published run sets: " + "; ".join(text))


def _delta(seconds: float, digits: int = 1) -> str:
    return f"{seconds * 1e3 + 0.0:+.{digits}f} ms"


def _decode_gap(case: Trn2Case, predicted_s: float) -> str:
    """The TPOT with the published configuration's mechanisms added one at a time, each measured."""
    from backend.sim import get_target
    target = get_target(case.target)
    layers, context = case.sizes["num_hidden_layers"], case.prompt + case.output // 2
    served = _per_layer_s(case, context - 1, 1, laid_out=False)
    laid = _per_layer_s(case, context - 1, 1, laid_out=True)
    layer = _per_layer(case, context - 1, 1, laid_out=True, launches=False)
    padded = max(case.decode_bucket, context)
    bucketed = _per_layer(case, padded - 1, 1, laid_out=True, launches=False)
    steps = [("weights laid out at load", layers * (laid - served)),
             (f"the same ops with no per-op dispatch (one compiled graph, one launch per step; eager pays "
              f"{target.launch_overhead_ns / 1e3:.0f} us an op, exposed where the op runs shorter)",
              layers * (layer["s"] - laid)),
             (f"the ops besides GEMMs and attention (norms, RoPE, SiLU x up, residual adds, casts: "
              f"{layer['other_s'] * 1e6:.0f} us a layer, each an HBM round trip) fused into the published QKV and "
              "MLP kernels at no cost, the most fusion can save", -layers * layer["other_s"]),
             (f"attention over the {padded}-position token-generation bucket",
              layers * (bucketed["s"] - bucketed["other_s"] - layer["s"] + layer["other_s"]))]
    text, now = [], predicted_s
    for what, change in steps:
        now += change
        text.append(f"{what}: {_delta(change)} -> {now / (case.tpot_ms * 1e-3):.2f}")
    return (f"predicted as served: a layer of the shard {served * 1e3:.3f} ms at the median context ({context}); "
            "measured on the same shard, adding what the published run does: " + "; ".join(text)
            + f"; left: the GEMVs stream a layer's {layer['gemm_bytes'] / 1e6:.0f} MB at "
            f"{layer['gemm_bytes'] / layer['gemm_s'] / 1e9:.0f} GB/s of the core's {target.hbm_bytes_per_s / 1e9:.0f} "
            "GB/s HBM share")


def _rows(case: Trn2Case) -> list[Row]:
    s = _served(case)
    ttft, tpot = s["ttft_p50_s"], s["tpot_p50_s"]
    head = (f"{case.source}; published configuration: {case.configuration}; predicted: wb.serve of the Hugging Face "
            f"LlamaForCausalLM built timing-only from the checkpoint's config, TP{case.tp} shards (1 and 2 layers, "
            f"extrapolated), the TP all-reduces on the {case.target} topology, batch {case.batch} arriving together")
    rows = []
    for metric, predicted, published, gap in (("TTFT", ttft, case.ttft_ms, _prefill_gap),
                                              ("TPOT", tpot, case.tpot_ms, _decode_gap)):
        note = head
        if not IN_RANGE[0] <= predicted / (published * 1e-3) <= IN_RANGE[1]:
            note += "; " + gap(case, predicted)
        rows.append(Row(f"{case.name} {metric} p50", predicted * 1e9, published * 1e6, None, note))
    return rows


def trn2_rows() -> list[Row]:
    return [row for case in CASES for row in _rows(case)]


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    print(format_table(trn2_rows()))


if __name__ == "__main__":
    main()
