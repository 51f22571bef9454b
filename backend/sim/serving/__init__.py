"""Request-level serving simulation: arrivals, vLLM-style schedulers, paged KV accounting, metrics.

Pure simulation, driven by an iteration-cost function ``cost(Iteration) -> seconds``; the
workbench measures that function on a real model (``workbench.serving``). Torch-free.

    reqs = poisson_requests(rate_per_s=2.0, count=100, prompt_tokens=512, output_tokens=128, seed=0)
    run = simulate(reqs, lambda it: 0.01 + 1e-5 * it.num_tokens, num_gpu_blocks=2048,
                   scheduler=SchedulerConfig(enable_chunked_prefill=True))
    summarize(run, slo={"ttft_s": 0.5, "tpot_s": 0.05})
"""
from backend.sim.serving.engine import IterationRecord, RequestRecord, ServingRun, simulate
from backend.sim.serving.kv_cache import BlockManager, blocks_for, kv_bytes_per_token, num_kv_blocks
from backend.sim.serving.metrics import SLO, summarize
from backend.sim.serving.requests import (TRANSCRIPT_TOKENS_PER_AUDIO_S, Request, audio_windows, gamma_requests,
                                         poisson_requests, speech_requests, trace_requests)
from backend.sim.serving.scheduler import Iteration, Scheduler, SchedulerConfig, Sequence

__all__ = ["Request", "poisson_requests", "gamma_requests", "trace_requests", "speech_requests", "audio_windows",
           "TRANSCRIPT_TOKENS_PER_AUDIO_S", "SchedulerConfig", "Scheduler",
           "Sequence", "Iteration", "BlockManager", "blocks_for", "kv_bytes_per_token", "num_kv_blocks",
           "simulate", "ServingRun", "RequestRecord", "IterationRecord", "SLO", "summarize"]
