"""The serving event loop: requests arrive, the scheduler forms iterations, a cost function times them.

    run = simulate(requests, cost, num_gpu_blocks=4096, scheduler=SchedulerConfig(), replicas=2)
    run.requests          # RequestRecord per request: queueing, TTFT, TPOT, inter-token latencies
    run.iterations        # IterationRecord per forward pass: batch, tokens, KV blocks in use

``cost(iteration) -> seconds`` prices one forward pass (an :class:`Iteration`: prefill chunks and
decode contexts); the workbench measures it on the real model, tests pass a formula. An
iteration starts as soon as the replica is idle and has work, takes ``cost`` seconds, and every
sequence whose tokens are all computed at its end emits a token then. Replicas share nothing:
requests go to them round-robin in arrival order, as behind a plain load balancer.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from backend.sim.serving.requests import Request
from backend.sim.serving.scheduler import Iteration, Scheduler, SchedulerConfig, Sequence

__all__ = ["RequestRecord", "IterationRecord", "ServingRun", "simulate"]

CostFn = Callable[[Iteration], float]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What one request saw (times in seconds from the start of the load; NaN where undefined)."""

    request_id: int
    replica: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    audio_s: float
    scheduled_s: float
    queueing_s: float
    first_token_s: float
    ttft_s: float
    tpot_s: float
    itl_mean_s: float
    itl_p50_s: float
    itl_p99_s: float
    itl_max_s: float
    finish_s: float
    e2e_s: float
    preemptions: int
    rejected: str

    def to_record(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One forward pass of one replica."""

    replica: int
    start_s: float
    duration_s: float
    batch_size: int
    prefill_tokens: int
    decode_tokens: int
    encoder_tokens: int       # encoder inputs run in this pass (encoder-decoder models)
    kv_blocks_used: int
    kv_blocks_total: int
    waiting: int
    preempted: int

    def to_record(self) -> dict:
        return asdict(self)


@dataclass
class ServingRun:
    requests: list
    iterations: list
    itl_s: np.ndarray           # every inter-token latency of every request, pooled

    def request_records(self) -> list[dict]:
        return [r.to_record() for r in self.requests]

    def iteration_records(self) -> list[dict]:
        return [r.to_record() for r in self.iterations]


def _record(seq: Sequence, replica: int) -> tuple[RequestRecord, np.ndarray]:
    req, nan = seq.request, float("nan")
    times = np.asarray(seq.token_times_s, dtype=float)
    itl = np.diff(times)
    first = times[0] if times.size else nan
    done = seq.finished_s if seq.finished_s is not None else nan
    stats = (itl.mean(), np.percentile(itl, 50), np.percentile(itl, 99), itl.max()) if itl.size else (nan,) * 4
    scheduled = seq.first_scheduled_s if seq.first_scheduled_s is not None else nan
    return RequestRecord(
        req.request_id, replica, req.arrival_s, req.prompt_tokens, req.output_tokens, req.audio_s, scheduled,
        scheduled - req.arrival_s, first, first - req.arrival_s,
        (done - first) / (req.output_tokens - 1) if req.output_tokens > 1 and not seq.rejected else nan,
        *map(float, stats), done, done - req.arrival_s, seq.preemptions, seq.rejected), itl


def _run_replica(requests: list[Request], cost: CostFn, config: SchedulerConfig, num_gpu_blocks: int,
                 replica: int, iterations: list) -> list[Sequence]:
    sched = Scheduler(config, num_gpu_blocks)
    pending = [Sequence(r) for r in sorted(requests, key=lambda r: (r.arrival_s, r.request_id))]
    nxt, now = 0, 0.0
    while nxt < len(pending) or sched.has_work():
        while nxt < len(pending) and pending[nxt].request.arrival_s <= now:
            sched.add(pending[nxt])
            nxt += 1
        preempted_before = sched.preemptions
        iteration, work = sched.schedule(now)
        if not iteration:
            if nxt >= len(pending):
                if sched.has_work():
                    raise RuntimeError(f"replica {replica}: {len(sched.waiting)} waiting and "
                                       f"{len(sched.running)} running sequences but nothing can be scheduled")
                break
            now = max(now, pending[nxt].request.arrival_s)
            continue
        duration = float(cost(iteration))
        if not duration > 0:
            raise ValueError(f"cost({iteration}) returned {duration!r}; an iteration must take > 0 seconds")
        end = now + duration
        preempted = sched.preemptions - preempted_before
        iterations.append(IterationRecord(replica, now, duration, len(work), iteration.prefill_tokens,
                                          iteration.decode_batch, sum(iteration.encoder_inputs), sched.kv.used,
                                          sched.kv.num_blocks,
                                          len(sched.waiting), preempted))
        for seq, n in work:
            seq.computed += n
            if seq.uncomputed == 0:               # all known tokens cached: the model samples one more
                seq.prefilled = True
                seq.generated += 1
                seq.token_times_s.append(end)
                if seq.generated >= seq.request.output_tokens:
                    seq.finished_s = end
                    sched.release(seq)
                    sched.running.remove(seq)
        now = end
    return pending


def simulate(requests, cost: CostFn, *, num_gpu_blocks: int, scheduler: SchedulerConfig | None = None,
             replicas: int = 1) -> ServingRun:
    """Serve ``requests`` on ``replicas`` independent replicas of ``num_gpu_blocks`` KV blocks each."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    config = scheduler or SchedulerConfig()
    ordered = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    records, iterations, itls = [], [], []
    for replica in range(replicas):
        for seq in _run_replica(ordered[replica::replicas], cost, config, num_gpu_blocks, replica, iterations):
            record, itl = _record(seq, replica)
            records.append(record)
            itls.append(itl)
    records.sort(key=lambda r: r.request_id)
    iterations.sort(key=lambda r: (r.start_s, r.replica))
    return ServingRun(records, iterations, np.concatenate(itls) if itls else np.empty(0))
