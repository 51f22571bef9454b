"""Multi-chip fidelity rows: the TP32 Llama pretraining and decode rows, with their bands.

``tp_llama`` runs rank 0's shard of the shared Llama on a fake world; here its op stream is
extrapolated from one and two layers as in ``models``, priced on the trn1.32xlarge topology
seen per core, and banded over the compute assumptions (``time_band``) and the topology's
assumed step latencies.
"""
from __future__ import annotations

from collections.abc import Callable

from backend.sim.collectives import collective_cost
from backend.sim.sensitivity import PRESET, Effect, Knob, TimeBand, time_band
from backend.lowering.collectives import priced_on
from backend.sim.topology import Topology, get_topology
from benchmarks.fidelity.tp_llama import LLAMA_3_1_8B, TP, TRN1_CORES_PER_CHIP, core_topology, tp_llama_records

__all__ = ["core_topology", "tp_llama_records", "llama_pretraining_row", "llama_decode_row", "TRN1_CORES_PER_CHIP",
           "dominant_note"]


def _latency_knobs(topology: Topology) -> list[Knob]:
    """The topology's assumed step latencies, as band knobs."""
    found = []
    for f in type(topology).spec_fields():
        info = topology.info(f.name)
        if info.is_assumption and info.plausible is not None:
            found.append(Knob(f"{PRESET}{topology.name}.{f.name}", info.value, *info.plausible))
    return found


def _scaleout_band(build: Callable[[int], list], layers: int, target) -> TimeBand:
    """``time_band`` of the ``layers``-deep extrapolation over the compute assumptions, widened by
    the topology's latency assumptions one at a time (compute and exposed communication add)."""
    one, two = build(1), build(2)

    def run(compute_target, topology: Topology = core_topology()) -> float:
        from backend.lowering.timeline import replay
        t1 = replay(priced_on(one, topology), compute_target)
        return t1 + (layers - 1) * (replay(priced_on(two, topology), compute_target) - t1)

    band = time_band(run, target)
    effects, low, high = list(band.effects), band.low_ns, band.high_ns
    for knob in _latency_knobs(core_topology()):
        field = knob.name.rsplit(".", 1)[1]
        at_low = run(target, core_topology(**{field: knob.low}))
        at_high = run(target, core_topology(**{field: knob.high}))
        effects.append(Effect(knob, at_low, at_high))
        low -= max(0.0, band.nominal_ns - min(at_low, at_high))
        high += max(0.0, max(at_low, at_high) - band.nominal_ns)
    return TimeBand(band.nominal_ns, low, high, tuple(sorted(effects, key=lambda e: -e.swing_ns)))


def dominant_note(band: TimeBand | None, n: int = 2) -> str:
    """"; dominant: a, b": the assumptions that move a band most (each named once)."""
    names = ", ".join(dict.fromkeys(e.knob.name for e in band.dominant(n))) if band else ""
    return f"; dominant: {names}" if names else ""


# The published run (Neuron trn1 training performance table, training_data_decoder.csv, SDK 2.24):
# micro-batch 1, global batch 1024, DP 32, ZeRO-1, "Autocast:BF16+FP32Optimizer" on
# "trn1.32xlarge/trn1n.32xlarge" (800 or 1600 Gbps EFA: which one is not said, so both bound the band).
GLOBAL_BATCH, MICRO_BATCH, DP = 1024, 1, 32
MICRO_BATCHES_PER_STEP = GLOBAL_BATCH // (DP * MICRO_BATCH)      # per DP replica: 32
_GRAD_BYTES = 4         # autocast keeps fp32 parameters, so gradients and the ZeRO-1 all-gather are fp32
_EFA_TRN1N_SCALE = 2    # EFA 1,600 Gbps (trn1n) / 800 Gbps (trn1): shared/hardware.md Scale-out table


def _dp_gradient_ms(tp: int, dp: int, inter_scale: float = 1.0, config=LLAMA_3_1_8B) -> float:
    """ZeRO-1's gradient reduce_scatter plus parameter all_gather over the DP group (the bytes of
    one all_reduce) of a TP rank's fp32 shard, once per optimizer step: one rank per instance,
    the instance's EFA shared by its cores (``inter_scale`` x trn1.32xlarge's). A rank holds one
    query head and one (replicated) K/V head: ``tp`` is the number of query heads."""
    d, ffn, hd = config.hidden_size, config.intermediate_size, config.head_dim
    local = config.num_hidden_layers * (4 * hd * d + 3 * (ffn // tp) * d + 2 * d) + 2 * (config.vocab_size // tp) * d
    chip = get_topology("trn1.32xlarge")
    network = chip.derive("trn1.32xlarge/dp", devices_per_node=1,
                          inter_bytes_per_s=chip.inter_bytes_per_s * inter_scale / TRN1_CORES_PER_CHIP)
    return collective_cost("all_reduce", _GRAD_BYTES * local, dp, network).time_ns / 1e6


def _with_dp_share(band: TimeBand) -> tuple[TimeBand, float]:
    """``band`` plus each sequence's share of the once-per-step DP exchange (global batch / DP
    micro-batches per replica share it; exposed: ZeRO-1 reduces after the last micro-batch), on
    trn1 (nominal, high) or trn1n (low) networking; and that share in ns."""
    slow, fast = (_dp_gradient_ms(TP, DP, scale) * 1e6 / MICRO_BATCHES_PER_STEP for scale in (1, _EFA_TRN1N_SCALE))
    efa = Effect(Knob(f"{PRESET}trn1.32xlarge/trn1n.32xlarge EFA x", 1, 1, _EFA_TRN1N_SCALE),
                 band.nominal_ns + slow, band.nominal_ns + fast)
    effects = tuple(sorted((*band.effects, efa), key=lambda e: -e.swing_ns))
    return TimeBand(band.nominal_ns + slow, band.low_ns + fast, band.high_ns + slow, effects), slow


def llama_pretraining_row():
    """Llama-3.1-8B pretraining, seq 8192, TP32 x DP32 on 32 trn1.32xlarge: one sequence's forward
    and backward on a TP rank plus its share of the DP exchange, against 32 / 47.95 s (each DP
    replica's share of the throughput)."""
    from backend.sim import get_target
    from benchmarks.fidelity.table import Row

    trn1 = get_target("trn1")
    # The published recipe (NeuronX Distributed "Training Llama3.1-8B ... with Tensor Parallelism and
    # ZeRO-1" tutorial): tensor parallelism, sequence parallelism, selective checkpointing, ZeRO-1.
    band, dp_ns = _with_dp_share(_scaleout_band(
        lambda n: tp_llama_records(n, mode="train", seq=8192, sequence_parallel=True,
                                    selective_checkpoint=True, standard_mixed_precision=True),
        LLAMA_3_1_8B.num_hidden_layers, trn1))
    published_ns = DP / 47.95 * 1e9
    note = ("rank 0 of a fake TP32 world, timing-only, eager ops on neuron; the shared wb.models.Llama built as "
            "an NxD user builds it (TensorParallel(32, sequence_parallel=True): vocab-parallel embedding, fused "
            "q/k/v and gate/up column-parallel linears as the recipe's GQAQKVColumnParallelLinear and gate_up_proj, "
            "o/down row-parallel, vocab-parallel lm_head; not DTensor) with sequence parallelism as the NxD recipe "
            "(RMSNorm and residuals on 1/32 of the tokens, reduce_scatter + all_gather per block fwd and bwd, and the "
            "column-parallel linears all-gathering their input again in bwd as NxD's LinearWithAsyncCommunication), "
            "RoPE on q and k, the device's fused SDPA op, selective checkpointing as NxD's Llama (Remat saving "
            "every named value but the core attention and the SwiGLU activation, which are recomputed in bwd), "
            "NxD Standard Mixed Precision (bf16 weights; RMSNorm in fp32 with fp32 weights; "
            "each bf16 gradient cast and added into an fp32 main_grad every micro-batch, torch_xla ZeRO-1's "
            "grad-acc hook), NxD's vocab-parallel cross-entropy on the shifted fp32 logits; eager elementwise ops, "
            "not fused as the compiled graph; collectives on trn1.32xlarge per core, each awaited where issued "
            "(NxD's sequence-parallel backward holds no async handle; neuronx-cc's own overlap not modelled); "
            "32 layers from 1 and 2; published = 32 DP replicas / 47.95 seq/s per sequence; plus "
            f"{dp_ns / 1e6:.1f} ms per sequence: ZeRO-1's fp32 reduce_scatter + all_gather over DP32 "
            f"({_dp_gradient_ms(TP, DP):.0f} ms per optimizer step on trn1 EFA) shared by the "
            f"{MICRO_BATCHES_PER_STEP} micro-batches of the published global batch {GLOBAL_BATCH}; "
            "left out: the K/V-gradient all_reduces of KV replication over 4-rank groups, and the ZeRO-1 optimizer update "
            "itself (1/32 of a rank's shard)" + dominant_note(band))
    return Row("Llama-3.1-8B pretraining, per sequence per TP32 group (s8192, TP32xDP32, 32x trn1.32xlarge)",
               band.nominal_ns, published_ns, band, note)


def llama_decode_row():
    """Llama-3-8B decode, TP32, batch 8, 128 in / 8064 out on trn1.32xlarge: time per output token."""
    from backend.sim import get_target
    from benchmarks.fidelity.table import Row

    trn1 = get_target("trn1")
    context = 128 + 8064 // 2
    band = _scaleout_band(lambda n: tp_llama_records(n, mode="decode", batch=8, context=context, model="Llama-3-8B"),
                          LLAMA_3_1_8B.num_hidden_layers, trn1)
    note = ("rank 0 of a fake TP32 world, timing-only, eager ops on neuron (published: a compiled graph, whose "
            "elementwise fusion is not modelled); one decode step of the shared wb.models.Llama built as a TP32 "
            "shard (TensorParallel(32): vocab-parallel embedding and lm_head, q/k/v and gate/up as separate "
            "column-parallel matmuls as transformers-neuronx loads them, o/down row-parallel; not DTensor), linear "
            "weights laid out [in, out] at load as transformers-neuronx does; RMSNorm in fp32 and RoPE as Hugging "
            "Face's Llama computes them; the device's fused SDPA op over a static KV cache written in place "
            "(8 sequences x 1 head per rank, software-pipelined); 64 block all_reduces, the embedding's all_reduce "
            "and a logits all_gather per token on trn1.32xlarge per core, greedy argmax over the gathered "
            f"vocabulary; KV cache of {context} positions (the median token of 128 in / "
            "8064 out); 32 layers from 1 and 2" + dominant_note(band))
    return Row("Llama-3-8B decode, time per output token (TP32, b8, trn1.32xlarge)", band.nominal_ns, 9.95e6, band,
               note)
