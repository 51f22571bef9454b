"""Error bands of a serving run: how far its metrics move when the simulator's assumptions move.

A profile's band (``Profile.time_band()``, ``backend.sim.sensitivity``) replays its op stream with
every modelling assumption of the target at its plausible range ends. A serving run is thousands
of iterations, so it is banded through its iteration kinds instead: one representative forward
of each kind (a causal LM's prefill and decode; a Whisper-style model's encoder window, admission
and decode) is profiled on a one-layer build and banded, and the request simulation runs again
with every iteration of a kind scaled by that kind's ``low / nominal`` and then ``high / nominal``
ratios. A metric's band is the range of its value over the nominal, low and high runs.

What that assumes: an assumption moves every iteration of a kind by the same ratio as the
representative (batch and context change the op mix, so the far ends of the grid may move by more
or less), and the tensor-parallel all-reduces move with the compute. Host cost: the replays of
``2 x assumptions + 3`` runs per kind (seconds on GPU and TPU targets, about a minute per kind on
a NeuronCore, whose instruction-level simulator has 26 assumptions) plus two more request
simulations; the bands are cached per cost model, so a sweep pays them once per target and tp.
"""
from __future__ import annotations

import pandas as pd
import torch

from backend.sim.serving import Iteration, SchedulerConfig, simulate, summarize
from workbench.serving.encoder_decoder import EncoderDecoderCosts
from workbench.serving.kv_slots import slot_cache
from workbench.serving.model_shapes import build_timing_only, shard_config

__all__ = ["BAND_METRICS", "part_bands", "banded_summary"]

BAND_METRICS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "itl_p99_s", "e2e_p50_s",
                "throughput_tokens_per_s", "requests_per_s", "goodput_requests_per_s", "usd_per_1m_tokens",
                "audio_seconds_per_s", "usd_per_audio_hour")

_BANDS: dict = {}       # id of a cost model -> its part bands (cost models live for the session)


def _profile(device: str, target: str, fn):
    import workbench as wb
    with torch.no_grad(), torch.neuron.timing_only(values_up_to=0), wb.profile(device=device, target=target, timing_only=True, source=False) as prof:
        fn()
    return prof


def _causal_profiles(costs, model_config) -> dict:
    """A prefill of up to 512 tokens and a decode of up to 8 sequences at the grid's middle context,
    on one layer of one device's share."""
    config = shard_config(model_config, costs.tp, 1)
    model = build_timing_only(config, costs.dtype)
    shapes = {"prefill": (1, 0, min(512, costs.prefill_tokens[-1])),
              "decode": (min(8, costs.decode_batches[-1]), costs.decode_contexts[1] - 1, 1)}
    profiles = {}
    for kind, (batch, cached, new) in shapes.items():
        with torch.neuron.timing_only(values_up_to=0):
            cache = slot_cache(config, batch, cached, new, costs.dtype)
            ids = torch.zeros(batch, new, dtype=torch.long, device="neuron")
        profiles[kind] = _profile(costs.device, costs.target,
                                  lambda: model(ids, past_key_values=cache, logits_to_keep=1))
    return profiles


def _speech_profiles(costs: EncoderDecoderCosts) -> dict:
    profiles = {"encoder": costs.encoder_profile(1, 1), "admit": costs.decoder_profile(1, 1, 0, 4),
                "decode": costs.decoder_profile(1, min(8, costs.decode_batches[-1]), costs.decode_contexts[1] - 1, 1)}
    costs.release()
    return profiles


def part_bands(costs, model_config) -> dict:
    """``{kind: TimeBand}`` of each iteration kind's representative forward (cached)."""
    key = id(costs)
    if key not in _BANDS:
        speech = isinstance(costs, EncoderDecoderCosts)
        profiles = _speech_profiles(costs) if speech else _causal_profiles(costs, model_config)
        _BANDS[key] = (costs, {kind: prof.time_band() for kind, prof in profiles.items()})
    return _BANDS[key][1]


def _parts(costs, cost, iteration: Iteration) -> dict:
    """An iteration's seconds (``cost(iteration)``) by kind."""
    seconds = cost(iteration)
    if isinstance(costs, EncoderDecoderCosts):
        encoder = costs.encoder_s(len(iteration.encoder_inputs))
        chunks = iteration.prefill_chunks
        admit = costs.admit_s(len(chunks), sum(n for n, _ in chunks) / len(chunks)) if chunks else 0.0
        return {"encoder": encoder, "admit": admit, "decode": seconds - encoder - admit}
    return {"prefill" if iteration.prefill_chunks else "decode": seconds}


def _scaled(costs, cost, ratios: dict):
    return lambda iteration: sum(s * ratios[k] for k, s in _parts(costs, cost, iteration).items())


def banded_summary(costs, model_config, requests, summary: dict, *, cost, num_gpu_blocks: int,
                   scheduler: SchedulerConfig, replicas: int, slo, prices) -> tuple[dict, pd.DataFrame]:
    """``summary`` with ``<metric>_low`` / ``<metric>_high`` for :data:`BAND_METRICS`, and one row per
    iteration kind: its representative's nominal time, band and the assumption that moves it most.
    ``cost`` is the iteration cost the run used (``costs`` or a view of it); ``prices(summary) ->
    dict`` adds the USD metrics to a summary."""
    bands = part_bands(costs, model_config)
    ends = []
    for end in ("low_ns", "high_ns"):
        ratios = {kind: getattr(b, end) / b.nominal_ns for kind, b in bands.items()}
        run = simulate(requests, _scaled(costs, cost, ratios), num_gpu_blocks=num_gpu_blocks, scheduler=scheduler,
                       replicas=replicas)
        moved = summarize(run, slo)
        moved.update(prices(moved))
        ends.append(moved)
    out = dict(summary)
    for metric in BAND_METRICS:
        values = [v for v in (summary.get(metric), *(e.get(metric) for e in ends)) if v is not None and v == v]
        out[f"{metric}_low"] = min(values) if values else float("nan")
        out[f"{metric}_high"] = max(values) if values else float("nan")
    rows = [{"kind": kind, "nominal_s": b.nominal_ns * 1e-9, "low_s": b.low_ns * 1e-9, "high_s": b.high_ns * 1e-9,
             "dominant": b.dominant(1)[0].knob.name if b.dominant(1) else ""} for kind, b in bands.items()]
    return out, pd.DataFrame(rows)
