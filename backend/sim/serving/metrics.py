"""Summary metrics of a serving run: latency percentiles, throughput, goodput under an SLO.

Names follow vLLM's benchmark_serving: TTFT (arrival to first token), TPOT (time per output
token after the first: ``(finish - first token) / (output tokens - 1)``), ITL (every gap between
consecutive tokens of a request, pooled over requests). Throughput counts output tokens over
the span from the first arrival to the last finish; goodput counts the requests that met every
SLO bound given (DistServe's definition).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from backend.sim.serving.engine import ServingRun

__all__ = ["SLO", "summarize"]


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency bounds a request must meet to count as good (None: no bound)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met(self, ttft_s: float, tpot_s: float, e2e_s: float) -> bool:
        tpot_ok = self.tpot_s is None or not tpot_s > self.tpot_s      # NaN (one output token): no TPOT
        return ((self.ttft_s is None or ttft_s <= self.ttft_s) and tpot_ok
                and (self.e2e_s is None or e2e_s <= self.e2e_s))

    @classmethod
    def coerce(cls, slo) -> "SLO":
        if slo is None:
            return cls()
        if isinstance(slo, cls):
            return slo
        return cls(**dict(slo))


def _pct(values, q: float) -> float:
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if values.size else float("nan")


def summarize(run: ServingRun, slo=None) -> dict:
    """The summary row of ``run`` (seconds, tokens, requests; NaN where nothing finished)."""
    slo = SLO.coerce(slo)
    done = [r for r in run.requests if not r.rejected]
    ttft = [r.ttft_s for r in done]
    tpot = [r.tpot_s for r in done]
    start = min((r.arrival_s for r in run.requests), default=0.0)
    end = max((r.finish_s for r in done), default=start)
    span = end - start
    per_s = (lambda x: x / span) if span > 0 else (lambda x: float("nan"))
    output_tokens = sum(r.output_tokens for r in done)
    good = sum(slo.met(r.ttft_s, r.tpot_s, r.e2e_s) for r in done)
    audio = sum(r.audio_s for r in done)
    return {
        "requests": len(run.requests), "completed": len(done), "rejected": len(run.requests) - len(done),
        "duration_s": span,
        "ttft_p50_s": _pct(ttft, 50), "ttft_p90_s": _pct(ttft, 90), "ttft_p99_s": _pct(ttft, 99),
        "tpot_p50_s": _pct(tpot, 50), "tpot_p90_s": _pct(tpot, 90), "tpot_p99_s": _pct(tpot, 99),
        "itl_p50_s": _pct(run.itl_s, 50), "itl_p99_s": _pct(run.itl_s, 99),
        "e2e_p50_s": _pct([r.e2e_s for r in done], 50),
        "queueing_p50_s": _pct([r.queueing_s for r in done], 50),
        "throughput_tokens_per_s": per_s(output_tokens),
        "total_tokens_per_s": per_s(output_tokens + sum(r.prompt_tokens for r in done)),
        "requests_per_s": per_s(len(done)),
        "goodput_requests_per_s": per_s(int(good)),
        "slo_attainment": good / len(done) if done else float("nan"),
        "audio_seconds": audio,
        "audio_seconds_per_s": per_s(audio) if audio else float("nan"),
        "preemptions": sum(r.preemptions for r in run.requests),
        "output_tokens": output_tokens,
    }
