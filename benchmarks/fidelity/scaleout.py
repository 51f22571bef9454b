"""Multi-chip fidelity rows: rank 0 of a fake world running a Megatron tensor-parallel Llama shard.

One process becomes rank 0 of the job's world (``workbench.distributed.fake_world``: PyTorch's
fake process group, no values exchanged) and runs, in timing-only mode on ``neuron``, the layers
of its tensor-parallel shard the way Megatron-LM (and NeuronX Distributed) cut them: the q/k/v
and gate/up projections column-parallel, the attention output and down projections
row-parallel, with Megatron's two conjugate collectives per block -- an all_reduce of the
activations after each row-parallel linear in the forward pass, and of the input gradient
before each column-parallel linear in the backward pass. The shard is built explicitly (shapes
divided by the TP degree) and the collectives are issued with ``torch.distributed.all_reduce``:
DTensor's ``parallelize_module`` is not used here. Grouped-query K/V heads are replicated up to
one per rank, as NeuronX Distributed's KV replication does when TP exceeds the KV heads.

Ranks are NeuronCores and trn1.32xlarge has two per chip, so a TP32 group is one instance: the
collectives are priced on the trn1.32xlarge preset seen per core (``core_topology``): 32
devices per node, each with its chip's link bandwidth (``backend.sim.topology.per_core``). Deep models are extrapolated from one and two layers as in ``workloads``; the band
varies the compute assumptions (``time_band``) and the topology's assumed step latencies.
"""
from __future__ import annotations

from collections.abc import Callable

from backend.sim.collectives import collective_cost
from backend.sim.sensitivity import PRESET, Effect, Knob, TimeBand, time_band
from backend.lowering.collectives import priced_on
from backend.sim.topology import Topology, get_topology, per_core
from benchmarks.fidelity.workloads import LLAMA_8B

__all__ = ["core_topology", "tp_llama_records", "llama_pretraining_row", "llama_decode_row", "TRN1_CORES_PER_CHIP"]

TRN1_CORES_PER_CHIP = 2         # shared/hardware.md Scale-out table: 16 Trainium, 32 cores
TP = 32                         # the published rows: TP32 over one trn1.32xlarge


def core_topology(name: str = "trn1.32xlarge", cores_per_chip: int = TRN1_CORES_PER_CHIP, **changes) -> Topology:
    """The chip topology seen by NeuronCore ranks (``backend.sim.topology.per_core``)."""
    return per_core(name, cores_per_chip, **changes)


def _megatron_functions():
    """Megatron's conjugate collectives: copy-to-TP (identity forward, all_reduce backward) and
    reduce-from-TP (all_reduce forward, identity backward)."""
    import torch
    import torch.distributed as dist

    class CopyToTP(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            dist.all_reduce(grad)
            return grad

    class ReduceFromTP(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            dist.all_reduce(x)
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad

    return CopyToTP.apply, ReduceFromTP.apply


def _rms(h, w):
    import torch
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def _tp_block(x, w, tp_in, tp_out, batch: int, cache=None):
    """One Llama block of a TP rank: RMSNorm, its 1/TP of the heads, SwiGLU over its 1/TP of the
    FFN. ``w``: (qkv, o, gate_up, down, norm1, norm2) shards. With ``cache`` (K, V of the whole
    context, the last position free), one decode step: the new K/V land in the cache."""
    import torch
    import torch.nn.functional as F

    wqkv, wo, wgu, wd, n1, n2 = w
    tokens, hd = x.shape[0], _HEAD_DIM
    q, k, v = tp_in(_rms(x, n1)).matmul(wqkv.t()).chunk(3, dim=-1)
    q, k, v = (t.reshape(batch, tokens // batch, -1, hd).transpose(1, 2) for t in (q, k, v))
    if cache is not None:
        k_cache, v_cache = cache
        k_cache[:, :, -1:].copy_(k)
        v_cache[:, :, -1:].copy_(v)
        k, v = k_cache, v_cache
    # The fused (flash) attention op, as the published runs use a flash-attention kernel; on a
    # PrivateUse1 device ``F.scaled_dot_product_attention`` would pick the unfused math form.
    attn = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=cache is None)[0]
    x = x + tp_out(attn.transpose(1, 2).reshape(tokens, -1).matmul(wo.t()))
    h = tp_in(_rms(x, n2))
    gate, up = h.matmul(wgu.t()).chunk(2, dim=-1)
    return x + tp_out((F.silu(gate) * up).matmul(wd.t()))


_HEAD_DIM = 128


def _shards(tp: int, requires_grad: bool, **dims):
    """A block's weight shards on ``neuron`` (bf16): heads and FFN split ``tp`` ways, K/V heads
    replicated up to one per rank when ``tp`` exceeds them."""
    import torch

    cfg = {**LLAMA_8B, **dims}
    d, heads, kv, ffn = cfg["d"], cfg["heads"], cfg["kv_heads"], cfg["ffn"]
    local_q, local_kv = max(1, heads // tp), max(1, kv // tp)
    if local_q != local_kv:
        raise ValueError(f"this shard builder keeps one K/V head per query head group of 1; got {local_q} "
                         f"query and {local_kv} K/V heads per rank")
    local_ffn = ffn // tp
    make = dict(device="neuron", dtype=torch.bfloat16, requires_grad=requires_grad)
    return [torch.empty(3 * local_q * _HEAD_DIM, d, **make), torch.empty(d, local_q * _HEAD_DIM, **make),
            torch.empty(2 * local_ffn, d, **make), torch.empty(d, local_ffn, **make),
            torch.empty(d, **make), torch.empty(d, **make)]


def tp_llama_records(layers: int, *, mode: str, tp: int = TP, seq: int = 8192, batch: int = 1,
                     context: int = 0, target: str = "trn1", **dims) -> list:
    """Rank 0's op records for ``layers`` TP-sharded Llama blocks and the vocab-parallel head.

    mode "train": one sequence-batch forward and backward (``batch`` x ``seq`` tokens, weight
    gradients included); mode "decode": one token for each of ``batch`` sequences against a KV
    cache of ``context`` positions. Run in a fake world of ``tp`` ranks in timing-only mode."""
    import torch
    import torch.distributed as dist

    from workbench.distributed import fake_world
    from workbench.session import profile

    if mode not in ("train", "decode"):
        raise ValueError(f"mode must be 'train' or 'decode', got {mode!r}")
    cfg = {**LLAMA_8B, **dims}
    copy_to_tp, reduce_from_tp = _megatron_functions()
    fake_world(tp, topology="trn1.32xlarge")
    try:
        with profile(target=target, source=False, timing_only=True) as prof:
            train = mode == "train"
            tokens = batch * seq if train else batch
            blocks = [_shards(tp, train, **dims) for _ in range(layers)]
            head = torch.empty(cfg["vocab"] // tp, cfg["d"], device="neuron", dtype=torch.bfloat16, requires_grad=train)
            x = torch.empty(tokens, cfg["d"], device="neuron", dtype=torch.bfloat16, requires_grad=train)
            h = x
            for w in blocks:
                cache = None
                if not train:
                    shape = (batch, w[1].shape[1] // _HEAD_DIM, context, _HEAD_DIM)
                    cache = (torch.empty(shape, device="neuron", dtype=torch.bfloat16),
                             torch.empty(shape, device="neuron", dtype=torch.bfloat16))
                h = _tp_block(h, w, copy_to_tp, reduce_from_tp, batch, cache)
            logits = copy_to_tp(_rms(h, blocks[-1][5])).matmul(head.t()).float()
            if train:
                # Vocab-parallel cross-entropy: the softmax denominator is summed over the TP group.
                sumexp = logits.exp().sum(-1)
                dist.all_reduce(sumexp)
                sumexp.log().sum().backward()
            else:
                gathered = torch.empty(tp * logits.numel(), device="neuron", dtype=logits.dtype)
                dist.all_gather_single(gathered, logits.reshape(-1))
                gathered.reshape(tp, batch, -1).argmax(-1)
    finally:
        dist.destroy_process_group()
    return prof.workload


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


def _dominant(band: TimeBand) -> str:
    names = ", ".join(e.knob.name for e in band.dominant(2))
    return f"; dominant: {names}" if names else ""


def _dp_gradient_ms(tp: int, dp: int, **dims) -> float:
    """One all_reduce of a TP rank's bf16 gradients over its DP group (one rank per instance, the
    instance's EFA shared by its cores)."""
    cfg = {**LLAMA_8B, **dims}
    d, ffn, hd = cfg["d"], cfg["ffn"], _HEAD_DIM
    local = cfg["layers"] * (4 * hd * d + 3 * (ffn // tp) * d + 2 * d) + 2 * (cfg["vocab"] // tp) * d
    chip = get_topology("trn1.32xlarge")
    network = chip.derive("trn1.32xlarge/dp", devices_per_node=1,
                          inter_bytes_per_s=chip.inter_bytes_per_s / TRN1_CORES_PER_CHIP)
    return collective_cost("all_reduce", 2 * local, dp, network).time_ns / 1e6


def llama_pretraining_row():
    """Llama-3.1-8B pretraining, seq 8192, TP32 x DP32 on 32 trn1.32xlarge: one sequence's forward
    and backward on a TP rank, against 32 / 47.95 s (each DP replica's share of the throughput)."""
    from backend.sim import get_target
    from benchmarks.fidelity.table import Row

    trn1 = get_target("trn1")
    band = _scaleout_band(lambda n: tp_llama_records(n, mode="train", seq=8192), LLAMA_8B["layers"], trn1)
    published_ns = 32 / 47.95 * 1e9
    note = ("rank 0 of a fake TP32 world, timing-only, eager ops on neuron; Megatron TP shard built explicitly "
            "(column/row-parallel linears, dist.all_reduce per block fwd and bwd; not DTensor), flash-attention "
            "op, no activation checkpointing; collectives on trn1.32xlarge per core with overlap; 32 layers from 1 "
            "and 2; published = 32 DP replicas / 47.95 seq/s per sequence; the DP gradient all_reduce "
            f"({_dp_gradient_ms(TP, 32):.0f} ms per optimizer step) and ZeRO-1 optimizer are amortised over an "
            "unstated number of micro-batches and left out" + _dominant(band))
    return Row("Llama-3.1-8B pretraining, per sequence per TP32 group (s8192, TP32xDP32, 32x trn1.32xlarge)",
               band.nominal_ns, published_ns, band, note)


def llama_decode_row():
    """Llama-3-8B decode, TP32, batch 8, 128 in / 8064 out on trn1.32xlarge: time per output token."""
    from backend.sim import get_target
    from benchmarks.fidelity.table import Row

    trn1 = get_target("trn1")
    context = 128 + 8064 // 2
    band = _scaleout_band(lambda n: tp_llama_records(n, mode="decode", batch=8, context=context),
                          LLAMA_8B["layers"], trn1)
    note = ("rank 0 of a fake TP32 world, timing-only, eager ops on neuron (published: a compiled graph); "
            "Megatron TP shard built explicitly (not DTensor), 64 block all_reduces + a logits all_gather per "
            f"token on trn1.32xlarge per core; KV cache of {context} positions (the median token of 128 in / "
            "8064 out); 32 layers from 1 and 2" + _dominant(band))
    return Row("Llama-3-8B decode, time per output token (TP32, b8, trn1.32xlarge)", band.nominal_ns, 9.95e6, band,
               note)
