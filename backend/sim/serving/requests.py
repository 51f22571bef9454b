"""Request loads for the serving simulation: arrivals at a rate, prompt and output lengths, traces.

    poisson_requests(rate_per_s=4.0, count=1000, prompt_tokens=512, output_tokens=(64, 256), seed=0)
    gamma_requests(rate_per_s=4.0, count=1000, cv=2.0, ...)          # burstier than Poisson at cv > 1
    trace_requests([(0.0, 512, 128), (0.1, 900, 64, 12.5)])          # (arrival_s, prompt, output[, audio_s])

A length is an int (every request), a ``(low, high)`` pair (uniform integers, both ends included)
or a callable ``(rng, count) -> sequence of ints``. Arrivals are seeded, so a load is reproducible.
Gamma arrivals follow Vidur's and vLLM's benchmark (``burstiness`` = 1 / cv^2): inter-arrival
times with mean ``1 / rate`` and coefficient of variation ``cv``; ``cv = 1`` is Poisson.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Request", "poisson_requests", "gamma_requests", "trace_requests"]


@dataclass(frozen=True, slots=True)
class Request:
    """One request: when it arrives, its prompt and how many tokens it generates."""

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    audio_s: float = 0.0      # seconds of audio the request carries (speech); 0 for text

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"request {self.request_id}: prompt_tokens and output_tokens must be >= 1, "
                             f"got {self.prompt_tokens} and {self.output_tokens}")
        if self.arrival_s < 0 or self.audio_s < 0:
            raise ValueError(f"request {self.request_id}: arrival_s and audio_s must be >= 0")


def _lengths(spec, rng: np.random.Generator, count: int, name: str) -> np.ndarray:
    if callable(spec):
        values = np.asarray(spec(rng, count), dtype=np.int64)
    elif isinstance(spec, tuple):
        low, high = spec
        values = rng.integers(low, high + 1, size=count)
    else:
        values = np.full(count, int(spec), dtype=np.int64)
    if values.shape != (count,) or (values < 1).any():
        raise ValueError(f"{name} must give {count} lengths >= 1, got {spec!r}")
    return values


def _build(gaps: np.ndarray, rng, count, prompt_tokens, output_tokens, audio_s) -> list[Request]:
    arrivals = np.cumsum(gaps) - gaps[0]          # the first request arrives at t = 0
    prompts = _lengths(prompt_tokens, rng, count, "prompt_tokens")
    outputs = _lengths(output_tokens, rng, count, "output_tokens")
    return [Request(i, float(a), int(p), int(o), float(audio_s)) for i, (a, p, o) in
            enumerate(zip(arrivals, prompts, outputs))]


def _check(rate_per_s: float, count: int) -> None:
    if rate_per_s <= 0 or count < 1:
        raise ValueError(f"rate_per_s must be > 0 and count >= 1, got {rate_per_s} and {count}")


def poisson_requests(rate_per_s: float, count: int, prompt_tokens=512, output_tokens=128, *,
                     seed: int = 0, audio_s: float = 0.0) -> list[Request]:
    """``count`` requests arriving as a Poisson process of ``rate_per_s`` (exponential gaps)."""
    _check(rate_per_s, count)
    rng = np.random.default_rng(seed)
    return _build(rng.exponential(1.0 / rate_per_s, size=count), rng, count, prompt_tokens, output_tokens, audio_s)


def gamma_requests(rate_per_s: float, count: int, prompt_tokens=512, output_tokens=128, *, cv: float = 1.0,
                   seed: int = 0, audio_s: float = 0.0) -> list[Request]:
    """``count`` requests with gamma-distributed gaps of mean ``1 / rate_per_s`` and coefficient of
    variation ``cv`` (shape ``1 / cv^2``)."""
    _check(rate_per_s, count)
    if cv <= 0:
        raise ValueError(f"cv must be > 0, got {cv}")
    rng = np.random.default_rng(seed)
    shape = 1.0 / cv ** 2
    gaps = rng.gamma(shape, 1.0 / (rate_per_s * shape), size=count)
    return _build(gaps, rng, count, prompt_tokens, output_tokens, audio_s)


def trace_requests(rows) -> list[Request]:
    """Requests from a trace: rows of ``(arrival_s, prompt_tokens, output_tokens[, audio_s])``, or
    anything with those columns (a DataFrame: ``rows.itertuples(index=False)`` is read by name)."""
    if hasattr(rows, "to_dict"):                  # a DataFrame, without importing pandas here
        rows = rows.to_dict("records")
    found = []
    for i, row in enumerate(rows):
        if isinstance(row, dict):
            missing = {"arrival_s", "prompt_tokens", "output_tokens"} - set(row)
            if missing:
                raise ValueError(f"trace row {i} lacks {', '.join(sorted(missing))}")
            found.append(Request(i, float(row["arrival_s"]), int(row["prompt_tokens"]), int(row["output_tokens"]),
                                 float(row.get("audio_s", 0.0) or 0.0)))
        else:
            arrival, prompt, output, *rest = row
            found.append(Request(i, float(arrival), int(prompt), int(output), float(rest[0]) if rest else 0.0))
    return sorted(found, key=lambda r: (r.arrival_s, r.request_id))
