"""The serving simulation on tiny cases worked out by hand: batch formation, chunking, preemption,
KV block accounting, watermark, caps and replicas (a constant 1 s iteration keeps times exact)."""
import math

import numpy as np
import pytest

from backend.sim.serving import (SLO, Request, SchedulerConfig, gamma_requests, kv_bytes_per_token, num_kv_blocks,
                                 poisson_requests, simulate, summarize, trace_requests)


def one_second(iteration):
    return 1.0


def _timeline(run, *fields):
    return [tuple(getattr(it, f) for f in fields) for it in run.iterations]


def test_continuous_batching_prefill_first_then_joint_decodes():
    reqs = [Request(0, 0.0, 4, 3), Request(1, 0.5, 4, 2)]
    run = simulate(reqs, one_second, num_gpu_blocks=100, scheduler=SchedulerConfig(block_size=2))
    assert _timeline(run, "start_s", "batch_size", "prefill_tokens", "decode_tokens", "kv_blocks_used") == [
        (0.0, 1, 4, 0, 2), (1.0, 1, 4, 0, 4), (2.0, 2, 0, 2, 6), (3.0, 2 - 1, 0, 1, 3)]
    r0, r1 = run.requests
    assert (r0.ttft_s, r0.tpot_s, r0.finish_s, r0.itl_mean_s, r0.itl_max_s) == (1.0, 1.5, 4.0, 1.5, 2.0)
    assert (r1.queueing_s, r1.ttft_s, r1.tpot_s, r1.finish_s) == (0.5, 1.5, 1.0, 3.0)
    assert list(run.itl_s) == [2.0, 1.0, 1.0]


def test_chunked_prefill_spends_the_budget_on_decodes_first():
    reqs = [Request(0, 0.0, 5, 2), Request(1, 0.0, 2, 2)]
    seen = []
    run = simulate(reqs, lambda it: seen.append(it) or 1.0, num_gpu_blocks=100,
                   scheduler=SchedulerConfig.named("sarathi", max_num_batched_tokens=3))
    assert [(it.prefill_chunks, it.decode_contexts) for it in seen] == [
        (((3, 0),), ()), (((2, 3), (1, 0)), ()), (((1, 1),), (6,)), ((), (3,))]
    assert [(r.ttft_s, r.finish_s) for r in run.requests] == [(2.0, 3.0), (3.0, 4.0)]


def test_decode_out_of_blocks_preempts_the_latest_by_recompute():
    reqs = [Request(0, 0.0, 2, 4), Request(1, 0.0, 2, 4)]
    run = simulate(reqs, one_second, num_gpu_blocks=4, scheduler=SchedulerConfig(block_size=2, watermark=0.0))
    assert _timeline(run, "start_s", "prefill_tokens", "decode_tokens", "kv_blocks_used", "preempted") == [
        (0.0, 4, 0, 2, 0), (1.0, 0, 2, 4, 0), (2.0, 0, 2, 4, 0), (3.0, 0, 1, 3, 1), (4.0, 5, 0, 3, 0)]
    r0, r1 = run.requests
    assert (r0.preemptions, r0.finish_s) == (0, 4.0)
    # r1 recomputes its prompt and its 3 tokens (5 tokens), then emits its 4th token
    assert (r1.preemptions, r1.ttft_s, r1.finish_s, r1.itl_max_s) == (1, 1.0, 5.0, 2.0)
    assert r1.tpot_s == pytest.approx(4 / 3)
    assert summarize(run)["preemptions"] == 1


def test_watermark_holds_back_admission_and_oversized_prompts_are_rejected():
    reqs = [Request(0, 0.0, 5, 2), Request(1, 0.0, 4, 1), Request(2, 0.0, 9, 1)]
    run = simulate(reqs, one_second, num_gpu_blocks=10, scheduler=SchedulerConfig(block_size=1, watermark=0.2))
    r0, r1, r2 = run.requests
    assert (r0.ttft_s, r0.finish_s) == (1.0, 2.0)
    assert (r1.queueing_s, r1.ttft_s, r1.finish_s) == (2.0, 3.0, 3.0)  # 10 - 5 - 4 < 2 watermark blocks
    assert math.isnan(r1.tpot_s)                                          # one output token: no TPOT
    assert "never fit" in r2.rejected and math.isnan(r2.ttft_s)
    s = summarize(run)
    assert (s["completed"], s["rejected"], s["output_tokens"]) == (2, 1, 3)


def test_prompt_over_the_token_budget_is_rejected_without_chunking():
    run = simulate([Request(0, 0.0, 40, 1)], one_second, num_gpu_blocks=100,
                   scheduler=SchedulerConfig(max_num_batched_tokens=32))
    assert "exceed the limit of 32" in run.requests[0].rejected
    run = simulate([Request(0, 0.0, 40, 1)], one_second, num_gpu_blocks=100,
                   scheduler=SchedulerConfig(max_num_batched_tokens=32, enable_chunked_prefill=True))
    assert (run.requests[0].ttft_s, len(run.iterations)) == (2.0, 2)


def test_max_num_seqs_caps_the_running_batch():
    reqs = [Request(i, 0.0, 4, 2) for i in range(3)]
    run = simulate(reqs, one_second, num_gpu_blocks=100, scheduler=SchedulerConfig(max_num_seqs=2))
    assert _timeline(run, "batch_size", "prefill_tokens", "decode_tokens") == [(2, 8, 0), (2, 0, 2), (1, 4, 0),
                                                                               (1, 0, 1)]
    assert [r.first_token_s for r in run.requests] == [1.0, 1.0, 3.0]


def test_idle_replica_waits_for_the_next_arrival_and_replicas_take_turns():
    reqs = [Request(i, 10.0 * i, 4, 1) for i in range(4)]
    run = simulate(reqs, lambda it: 0.25 * it.num_tokens, num_gpu_blocks=100, replicas=2)
    assert [(r.replica, r.first_token_s) for r in run.requests] == [(0, 1.0), (1, 11.0), (0, 21.0), (1, 31.0)]


def test_summary_counts_goodput_against_the_slo():
    reqs = [Request(0, 0.0, 4, 3), Request(1, 0.5, 4, 2)]
    run = simulate(reqs, one_second, num_gpu_blocks=100)
    s = summarize(run, slo={"ttft_s": 1.2})
    assert (s["duration_s"], s["throughput_tokens_per_s"], s["requests_per_s"]) == (4.0, 5 / 4, 2 / 4)
    assert (s["goodput_requests_per_s"], s["ttft_p50_s"]) == (1 / 4, 1.25)
    assert SLO(tpot_s=1.2).met(0.0, 1.5, 0.0) is False


def test_arrivals_are_seeded_and_have_the_asked_rate():
    a = poisson_requests(50.0, 4000, prompt_tokens=(10, 20), output_tokens=7, seed=3)
    assert a == poisson_requests(50.0, 4000, prompt_tokens=(10, 20), output_tokens=7, seed=3)
    gaps = np.diff([r.arrival_s for r in a])
    assert a[0].arrival_s == 0.0 and gaps.mean() == pytest.approx(1 / 50, rel=0.05)
    assert {r.output_tokens for r in a} == {7} and min(r.prompt_tokens for r in a) == 10
    assert max(r.prompt_tokens for r in a) == 20
    bursty = np.diff([r.arrival_s for r in gamma_requests(50.0, 4000, cv=3.0, seed=3)])
    assert bursty.mean() == pytest.approx(1 / 50, rel=0.15)
    assert bursty.std() / bursty.mean() == pytest.approx(3.0, rel=0.15)


def test_trace_rows_in_any_order_with_audio():
    reqs = trace_requests([(0.5, 10, 2, 3.0), (0.1, 5, 1)])
    assert [(r.arrival_s, r.prompt_tokens, r.audio_s) for r in reqs] == [(0.1, 5, 0.0), (0.5, 10, 3.0)]
    with pytest.raises(ValueError, match="lacks output_tokens"):
        trace_requests([{"arrival_s": 0.0, "prompt_tokens": 3}])


def test_kv_capacity_from_memory_minus_weights_and_activations():
    # Llama-3-8B: 32 layers, 8 KV heads of 128, bf16: 128 KiB per token; TP2 halves it
    assert kv_bytes_per_token(32, 8, 128) == 131072 and kv_bytes_per_token(32, 8, 128, tp=2) == 65536
    assert kv_bytes_per_token(32, 8, 128, tp=16) == 16384     # one KV head each (replicated), not half a head
    gib = 2**30
    assert num_kv_blocks(80 * gib, 16 * gib, 8 * gib, 131072, 16, 1.0) == 56 * gib // (16 * 131072)
    with pytest.raises(ValueError, match="no memory left for the KV cache"):
        num_kv_blocks(16 * gib, 16 * gib, 0, 131072)


def test_a_cost_that_is_not_positive_is_an_error():
    with pytest.raises(ValueError, match="must take > 0 seconds"):
        simulate([Request(0, 0.0, 4, 1)], lambda it: 0.0, num_gpu_blocks=10)
