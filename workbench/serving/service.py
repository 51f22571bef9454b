"""``wb.serve``: a request load on a real model, on any target, with vLLM's schedulers.

    result = wb.serve(LlamaConfig(...), wb.serving.poisson_requests(4.0, 1000, 512, 128),
                      target="trn2", tp=8, replicas=2, scheduler="sarathi", slo={"ttft_s": 1.0, "tpot_s": 0.05})
    result.summary["goodput_requests_per_s"], result.summary["usd_per_1m_tokens"]
    result.requests; result.timeline; result.interpolation; result.figures()

Iteration costs come from the model itself (``IterationCosts``: timing-only forwards through the
lowering and simulator, cached per model, target, tp and grid); the request-level simulation is
``backend.sim.serving``. The KV cache gets what vLLM gives it: ``gpu_memory_utilization`` of the
device's memory minus the device's share of the weights and the activations of the largest batch.

An encoder-decoder config (Whisper's) serves speech: each request's audio is cut into the
encoder's 30 s windows (``audio_windows``: one request per window, as vLLM's transcription
endpoint does), each window runs the encoder once on admission and holds its cross-attention
K/V in the KV cache (``EncoderDecoderCosts``); the summary adds ``audio_seconds_per_s`` and
``usd_per_audio_hour``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field

import pandas as pd
import torch

from backend.sim import assumptions
from backend.sim.presets import get_target
from backend.sim.pricing import price
from backend.sim.serving import (TRANSCRIPT_TOKENS_PER_AUDIO_S, Iteration, SchedulerConfig, audio_windows,
                                 kv_bytes_per_token, num_kv_blocks, poisson_requests, simulate, summarize,
                                 trace_requests)
from backend.sim.serving.requests import Request
from workbench.serving.encoder_decoder import EncoderDecoderCosts, is_encoder_decoder
from workbench.serving.iteration_costs import IterationCosts
from workbench.serving.model_shapes import ModelShape, _config_of

__all__ = ["serve", "ServingResult", "StaticCacheCosts", "iteration_costs", "activation_bytes"]

_COSTS: dict = {}       # (model config, target, tp, grid) -> IterationCosts, measured once per session


@dataclass
class ServingResult:
    """What a load did on one configuration: summary, one row per request, one per iteration."""

    summary: dict
    requests: pd.DataFrame
    timeline: pd.DataFrame
    interpolation: pd.DataFrame = field(default_factory=pd.DataFrame)
    label: str = ""
    bands: pd.DataFrame = field(default_factory=pd.DataFrame)   # per iteration kind, with serve(band=True)

    def figures(self) -> dict:
        from workbench.figures.serving import kv_occupancy_figure, latency_cdf_figure
        return {"latency_cdf": latency_cdf_figure(self), "kv_occupancy": kv_occupancy_figure(self)}

    def _repr_html_(self) -> str:
        keys = ("target", "tp", "replicas", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "itl_p99_s",
                "throughput_tokens_per_s", "goodput_requests_per_s", "usd_per_1m_tokens")
        if self.summary.get("model_kind") == "encoder-decoder":
            keys += ("audio_seconds_per_s", "usd_per_audio_hour")
        return pd.DataFrame([{k: self.summary.get(k) for k in keys}]).to_html(index=False)


def activation_bytes(shape: ModelShape, tp: int, token_budget: int, max_num_seqs: int) -> float:
    """Peak activations of the largest batch on one device (the estimate vLLM's profiling run
    measures): the hidden states, q/k/v and MLP intermediates of ``token_budget`` tokens in one
    layer, and fp32 logits of ``max_num_seqs`` sequences."""
    per_token = (4 * shape.hidden_size + 3 * shape.intermediate_size / tp
                 + 2 * (shape.num_attention_heads + shape.num_kv_heads) * shape.head_dim / tp)
    return per_token * token_budget * shape.dtype_bytes + max_num_seqs * shape.vocab_size / tp * 4


def _requests(requests, speech: bool = False) -> list[Request]:
    if isinstance(requests, dict):
        return poisson_requests(**requests)
    rows = list(requests) if not hasattr(requests, "to_dict") else requests
    if not hasattr(rows, "to_dict") and rows and isinstance(rows[0], Request):
        return rows
    if speech and hasattr(rows, "to_dict"):
        rows = _speech_trace(rows)
    return trace_requests(rows)


def _speech_trace(frame: pd.DataFrame) -> pd.DataFrame:
    """A speech trace may give only arrivals and audio: the decoder prompt is then Whisper's four
    task tokens and the transcript ``TRANSCRIPT_TOKENS_PER_AUDIO_S`` tokens per second of audio."""
    frame = frame.copy()
    audio = frame["audio_s"] if "audio_s" in frame else frame.get("audio_seconds")
    if "prompt_tokens" not in frame:
        frame["prompt_tokens"] = 4
    if "output_tokens" not in frame and audio is not None:
        frame["output_tokens"] = (audio * TRANSCRIPT_TOKENS_PER_AUDIO_S).round().clip(lower=1).astype(int)
    return frame


def _model_len(reqs: list[Request]) -> int:
    longest = max(r.prompt_tokens + r.output_tokens for r in reqs)
    return max(256, 1 << math.ceil(math.log2(longest)))


def iteration_costs(model_or_config, target: str, tp: int, config: SchedulerConfig, compiled: bool = True):
    """The (cached) iteration costs of a model on ``target`` for ``config``'s batch shapes:
    ``IterationCosts`` for a causal LM, ``EncoderDecoderCosts`` for a Whisper-style model (timed eagerly).
    ``compiled``: a causal LM's iterations as compiled graphs (False: the eager op stream)."""
    model_config = _config_of(model_or_config)
    # Keyed by the target's whole preset (a derived target may keep its base's name) and by the
    # assumptions moved right now: costs measured under other values must not be reused.
    key = (model_config.to_json_string(), repr(get_target(target)), assumptions.overrides(), tp, config.max_num_seqs,
           config.token_budget, config.max_model_len, config.enable_chunked_prefill, config.encoder_budget, compiled)
    if key not in _COSTS:
        if is_encoder_decoder(model_config):
            _COSTS[key] = EncoderDecoderCosts(model_config, target, tp=tp, max_num_seqs=config.max_num_seqs,
                                              max_model_len=config.max_model_len, encoder_budget=config.encoder_budget)
        else:
            _COSTS[key] = IterationCosts(model_config, target, tp=tp, max_num_seqs=config.max_num_seqs,
                                         token_budget=config.token_budget, max_model_len=config.max_model_len,
                                         chunked_prefill=config.enable_chunked_prefill, compiled=compiled)
    return _COSTS[key].build()


class StaticCacheCosts:
    """Iteration costs with a static (unpaged) KV cache, as Hugging Face's ``StaticCache``,
    JetStream and unpaged TensorRT-LLM keep it: each decode slot holds ``max_model_len`` positions
    and attention reads them all, so every decode costs what it costs at ``max_model_len``."""

    def __init__(self, costs, max_model_len: int):
        self.costs, self.max_model_len = costs, max_model_len

    def __call__(self, iteration: Iteration) -> float:
        contexts = (self.max_model_len,) * len(iteration.decode_contexts)
        return self.costs(Iteration(iteration.prefill_chunks, contexts, iteration.encoder_inputs))


def _prices(summary: dict, target: str, devices: int) -> dict:
    try:
        usd_per_hour = price(target).usd_per_device_hour * devices
    except ValueError:             # no instance holds this target (a derived preset)
        usd_per_hour = float("nan")
    usd = usd_per_hour * summary["duration_s"] / 3600
    audio_hours = summary["audio_seconds_per_s"] * summary["duration_s"] / 3600
    return {"devices": devices, "usd_per_hour": usd_per_hour, "usd": usd,
            "usd_per_1m_tokens": usd / summary["output_tokens"] * 1e6 if summary["output_tokens"] else float("nan"),
            "usd_per_audio_hour": usd / audio_hours if audio_hours > 0 else float("nan")}


def serve(model_or_config, requests, *, target: str = "trn2", tp: int = 1, replicas: int = 1,
          scheduler: str | SchedulerConfig = "vllm", slo=None, gpu_memory_utilization: float = 0.9,
          num_gpu_blocks: int | None = None, check: bool = True, band: bool = False, kv_cache: str = "paged",
          compiled: bool = True,
          **scheduler_options) -> ServingResult:
    """Serve ``requests`` with ``model_or_config`` (a Hugging Face causal LM or its config) on
    ``replicas`` replicas of ``tp`` devices of ``target``.

    ``requests``: a list of ``Request``, a trace (rows or a DataFrame with ``arrival_s``,
    ``prompt_tokens``, ``output_tokens`` and optionally ``audio_s`` / ``audio_seconds``) or a dict
    of ``poisson_requests`` arguments. A Whisper-style config (``WhisperConfig``) serves speech:
    requests carry audio seconds (``wb.serving.speech_requests``, or a trace whose missing
    ``prompt_tokens`` / ``output_tokens`` default to Whisper's 4 task tokens and 3.3 transcript
    tokens per audio second), one row per 30 s window in ``.requests``. ``scheduler``: ``"vllm"`` (continuous batching),
    ``"sarathi"`` (chunked prefill) or a ``SchedulerConfig``; ``scheduler_options`` are vLLM's
    names (``max_num_seqs``, ``max_num_batched_tokens``, ``block_size``, ``watermark``,
    ``max_model_len``). ``slo``: ``{"ttft_s": ..., "tpot_s": ..., "e2e_s": ...}`` for goodput.
    ``check``: compare the interpolated iteration costs with direct simulation (``.interpolation``).
    ``kv_cache``: ``"paged"`` (vLLM's blocks, attention over each sequence's own context) or
    ``"static"`` (a ``max_model_len`` slot per sequence, attention over the whole slot; the
    sequences that fit are the slots that fit).
    ``band``: error bands, as profiles have them (``workbench.serving.bands``): the summary gains
    ``<metric>_low`` / ``<metric>_high`` for latencies, throughputs and prices, ``.bands`` one row
    per iteration kind (seconds on GPU / TPU targets, about a minute per iteration kind on trn).
    ``compiled``: time iterations as compiled graphs, as serving engines run them (False: the
    eager op stream).
    """
    started = time.perf_counter()
    model_config = _config_of(model_or_config)
    speech = is_encoder_decoder(model_config)
    reqs = _requests(requests, speech)
    if not reqs:
        raise ValueError("serve() needs at least one request")
    if isinstance(scheduler, str):
        scheduler_options.setdefault("max_model_len", model_config.max_target_positions if speech else _model_len(reqs))
        config = SchedulerConfig.named(scheduler, **scheduler_options)
    elif scheduler_options:
        raise TypeError(f"serve() got scheduler options {sorted(scheduler_options)} and a SchedulerConfig; "
                        "put them in the SchedulerConfig")
    else:
        config = scheduler
    if kv_cache not in ("paged", "static"):
        raise ValueError(f"kv_cache must be 'paged' or 'static', got {kv_cache!r}")
    if speech and config.enable_chunked_prefill:
        raise ValueError("chunked prefill is not supported for encoder-decoder models (as in vLLM); "
                         "use scheduler='vllm'")
    costs = iteration_costs(model_or_config, target, tp, config, compiled)
    shape, batch_tokens = costs.shape, config.token_budget
    if speech:
        reqs = audio_windows(reqs, costs.window_s, costs.encoder_tokens)
        batch_tokens = max(config.encoder_budget, costs.encoder_tokens)      # the encoder's largest pass
    if num_gpu_blocks is None:
        weights = shape.num_params * shape.dtype_bytes / tp
        num_gpu_blocks = num_kv_blocks(get_target(target).hbm_bytes, weights,
                                       activation_bytes(shape, tp, batch_tokens, config.max_num_seqs),
                                       kv_bytes_per_token(shape.num_layers, shape.num_kv_heads, shape.head_dim,
                                                          shape.dtype_bytes, tp),
                                       config.block_size, gpu_memory_utilization)
    cost = costs
    if kv_cache == "static":
        slot = config.max_model_len + (costs.encoder_tokens if speech else 0)
        slots = num_gpu_blocks * config.block_size // slot
        if slots < 1:
            raise ValueError(f"no static KV slot of {slot} tokens fits the {num_gpu_blocks * config.block_size} "
                             "tokens of KV cache; lower max_model_len or use more tensor parallelism")
        config = dataclasses.replace(config, max_num_seqs=min(config.max_num_seqs, slots))
        cost = StaticCacheCosts(costs, config.max_model_len)
    run = simulate(reqs, cost, num_gpu_blocks=num_gpu_blocks, scheduler=config, replicas=replicas)
    summary = summarize(run, slo)
    prices = lambda found: _prices(found, costs.target, tp * replicas)
    summary.update(prices(summary))
    bands = pd.DataFrame()
    if band:
        from workbench.serving.bands import banded_summary
        summary, bands = banded_summary(costs, model_config, reqs, summary, cost=cost, num_gpu_blocks=num_gpu_blocks,
                                        scheduler=config, replicas=replicas, slo=slo, prices=prices)
    timeline = pd.DataFrame(run.iteration_records())
    if speech:        # the encoder's and the all-reduces' parts of each pass
        windows = timeline["encoder_tokens"] // costs.encoder_tokens
        timeline["encoder_s"] = [costs.encoder_s(w) for w in windows]
        timeline["communication_s"] = [costs.communication_s(w, p, d) for w, p, d in
                                       zip(windows, timeline["prefill_tokens"], timeline["decode_tokens"])]
    summary.update({"target": costs.target, "tp": tp, "replicas": replicas,
                    "model_kind": "encoder-decoder" if speech else "causal-lm",
                    "scheduler": "chunked_prefill" if config.enable_chunked_prefill else "continuous_batching",
                    "kv_cache": kv_cache, "max_num_seqs": config.max_num_seqs,
                    "compiled": getattr(costs, "compiled", False),
                    "num_gpu_blocks": num_gpu_blocks, "kv_cache_tokens": num_gpu_blocks * config.block_size,
                    "slo": json.dumps(dict(slo or {})), "iteration_shapes_measured": len(costs.measurements),
                    "host_time_s": time.perf_counter() - started})
    interpolation = pd.DataFrame(costs.check()) if check else pd.DataFrame()
    if check:
        summary["interpolation_error_max_percent"] = float(interpolation["error_percent"].abs().max())
    return ServingResult(summary, pd.DataFrame(run.request_records()), timeline, interpolation,
                         f"{costs.target} tp{tp} x{replicas}", bands)
