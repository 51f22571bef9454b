"""Request loads for the serving simulation: arrivals at a rate, prompt and output lengths, traces.

    poisson_requests(rate_per_s=4.0, count=1000, prompt_tokens=512, output_tokens=(64, 256), seed=0)
    gamma_requests(rate_per_s=4.0, count=1000, cv=2.0, ...)          # burstier than Poisson at cv > 1
    trace_requests([(0.0, 512, 128), (0.1, 900, 64, 12.5)])          # (arrival_s, prompt, output[, audio_s])
    speech_requests(rate_per_s=2.0, count=500, audio_s=(2.0, 30.0))  # transcription: audio, tokens from it
    audio_windows(reqs, window_s=30.0, encoder_tokens=1500)           # a Whisper-style encoder's windows

A length is an int (every request), a ``(low, high)`` pair (uniform integers, both ends included)
or a callable ``(rng, count) -> sequence of ints``; audio seconds the same, as floats. Arrivals are seeded, so a load is reproducible.
Gamma arrivals follow Vidur's and vLLM's benchmark (``burstiness`` = 1 / cv^2): inter-arrival
times with mean ``1 / rate`` and coefficient of variation ``cv``; ``cv = 1`` is Poisson.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Request", "poisson_requests", "gamma_requests", "trace_requests", "speech_requests", "audio_windows",
           "TRANSCRIPT_TOKENS_PER_AUDIO_S"]

# English speech runs at about 150 words a minute (2.5 words/s) and GPT-2's BPE, which Whisper's
# tokenizer extends, spends about 1.3 tokens per English word: about 3.3 transcript tokens per second.
TRANSCRIPT_TOKENS_PER_AUDIO_S = 3.3


@dataclass(frozen=True, slots=True)
class Request:
    """One request: when it arrives, its prompt and how many tokens it generates."""

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    audio_s: float = 0.0      # seconds of audio the request carries (speech); 0 for text
    encoder_tokens: int = 0   # encoder outputs the decoder cross-attends to (held in the KV cache); 0: decoder-only

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"request {self.request_id}: prompt_tokens and output_tokens must be >= 1, "
                             f"got {self.prompt_tokens} and {self.output_tokens}")
        if self.arrival_s < 0 or self.audio_s < 0 or self.encoder_tokens < 0:
            raise ValueError(f"request {self.request_id}: arrival_s, audio_s and encoder_tokens must be >= 0")


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


def _seconds(spec, rng: np.random.Generator, count: int) -> np.ndarray:
    if callable(spec):
        values = np.asarray(spec(rng, count), dtype=float)
    elif isinstance(spec, tuple):
        values = rng.uniform(spec[0], spec[1], size=count)
    else:
        values = np.full(count, float(spec))
    if values.shape != (count,) or (values < 0).any():
        raise ValueError(f"audio_s must give {count} durations >= 0, got {spec!r}")
    return values


def _build(gaps: np.ndarray, rng, count, prompt_tokens, output_tokens, audio_s) -> list[Request]:
    arrivals = np.cumsum(gaps) - gaps[0]          # the first request arrives at t = 0
    prompts = _lengths(prompt_tokens, rng, count, "prompt_tokens")
    outputs = _lengths(output_tokens, rng, count, "output_tokens")
    audio = _seconds(audio_s, rng, count)
    return [Request(i, float(a), int(p), int(o), float(s)) for i, (a, p, o, s) in
            enumerate(zip(arrivals, prompts, outputs, audio))]


def _check(rate_per_s: float, count: int) -> None:
    if rate_per_s <= 0 or count < 1:
        raise ValueError(f"rate_per_s must be > 0 and count >= 1, got {rate_per_s} and {count}")


def poisson_requests(rate_per_s: float, count: int, prompt_tokens=512, output_tokens=128, *,
                     seed: int = 0, audio_s=0.0) -> list[Request]:
    """``count`` requests arriving as a Poisson process of ``rate_per_s`` (exponential gaps)."""
    _check(rate_per_s, count)
    rng = np.random.default_rng(seed)
    return _build(rng.exponential(1.0 / rate_per_s, size=count), rng, count, prompt_tokens, output_tokens, audio_s)


def gamma_requests(rate_per_s: float, count: int, prompt_tokens=512, output_tokens=128, *, cv: float = 1.0,
                   seed: int = 0, audio_s=0.0) -> list[Request]:
    """``count`` requests with gamma-distributed gaps of mean ``1 / rate_per_s`` and coefficient of
    variation ``cv`` (shape ``1 / cv^2``)."""
    _check(rate_per_s, count)
    if cv <= 0:
        raise ValueError(f"cv must be > 0, got {cv}")
    rng = np.random.default_rng(seed)
    shape = 1.0 / cv ** 2
    gaps = rng.gamma(shape, 1.0 / (rate_per_s * shape), size=count)
    return _build(gaps, rng, count, prompt_tokens, output_tokens, audio_s)


def speech_requests(rate_per_s: float, count: int, audio_s=(2.0, 30.0), *, prompt_tokens: int = 4,
                    tokens_per_audio_s: float = TRANSCRIPT_TOKENS_PER_AUDIO_S, cv: float = 1.0,
                    seed: int = 0) -> list[Request]:
    """Transcription requests: ``audio_s`` seconds each (a number, a ``(low, high)`` uniform range or
    a callable), a decoder prompt of ``prompt_tokens`` (Whisper's ``<|startoftranscript|><|en|>
    <|transcribe|><|notimestamps|>``) and ``tokens_per_audio_s`` transcript tokens per second of
    audio (at least one); arrivals as :func:`gamma_requests` (``cv = 1``: Poisson)."""
    durations = _seconds(audio_s, np.random.default_rng(seed + 1), count)
    outputs = np.maximum(1, np.rint(durations * tokens_per_audio_s)).astype(np.int64)
    return gamma_requests(rate_per_s, count, prompt_tokens, lambda rng, n: outputs, cv=cv, seed=seed,
                          audio_s=lambda rng, n: durations)


def audio_windows(requests, window_s: float, encoder_tokens: int) -> list[Request]:
    """``requests`` as a fixed-window encoder sees them: one request per ``window_s`` of audio (as
    vLLM's transcription endpoint splits long audio into clips and serves each as a request), each
    carrying ``encoder_tokens`` (the encoder pads a short clip to a full window), the transcript
    tokens shared in proportion to the audio (at least one per window). The windows of a request
    arrive with it; ids are renumbered in order. Requests without audio keep ``encoder_tokens``
    for one window (an encoder-decoder always runs its encoder)."""
    if window_s <= 0 or encoder_tokens < 1:
        raise ValueError(f"window_s must be > 0 and encoder_tokens >= 1, got {window_s} and {encoder_tokens}")
    out = []
    for req in sorted(requests, key=lambda r: (r.arrival_s, r.request_id)):
        n = max(1, int(np.ceil(req.audio_s / window_s - 1e-9)))
        clips = [min(window_s, req.audio_s - k * window_s) for k in range(n)] if req.audio_s else [0.0]
        shares = np.cumsum([0.0, *clips]) / req.audio_s if req.audio_s else np.array([0.0, 1.0])
        bounds = np.rint(shares * req.output_tokens).astype(int)
        for k, clip in enumerate(clips):
            tokens = max(1, int(bounds[k + 1] - bounds[k]))
            out.append(Request(len(out), req.arrival_s, req.prompt_tokens, tokens, float(clip), encoder_tokens))
    return out


def _audio(row: dict) -> float:
    value = row.get("audio_s", row.get("audio_seconds", 0.0))
    return float(value or 0.0)


def trace_requests(rows) -> list[Request]:
    """Requests from a trace: rows of ``(arrival_s, prompt_tokens, output_tokens[, audio_s])``, or
    anything with those columns (a DataFrame: read by column name; audio as ``audio_s`` or
    ``audio_seconds``)."""
    if hasattr(rows, "to_dict"):                  # a DataFrame, without importing pandas here
        rows = rows.to_dict("records")
    found = []
    for i, row in enumerate(rows):
        if isinstance(row, dict):
            missing = {"arrival_s", "prompt_tokens", "output_tokens"} - set(row)
            if missing:
                raise ValueError(f"trace row {i} lacks {', '.join(sorted(missing))}")
            found.append(Request(i, float(row["arrival_s"]), int(row["prompt_tokens"]), int(row["output_tokens"]),
                                 _audio(row)))
        else:
            arrival, prompt, output, *rest = row
            found.append(Request(i, float(arrival), int(prompt), int(output), float(rest[0]) if rest else 0.0))
    return sorted(found, key=lambda r: (r.arrival_s, r.request_id))
