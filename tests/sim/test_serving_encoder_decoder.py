"""Encoder-decoder serving on tiny cases worked out by hand: the encoder runs in the admitting
iteration, cross-attention K/V holds KV blocks until the request finishes, the encoder budget,
preemption recomputes the encoder, audio windows and audio totals (1 s iterations keep times exact)."""
import numpy as np
import pytest

from backend.sim.serving import (TRANSCRIPT_TOKENS_PER_AUDIO_S, Request, SchedulerConfig, audio_windows, simulate,
                                 speech_requests, summarize, trace_requests)


def one_second(iteration):
    return 1.0


def _timeline(run, *fields):
    return [tuple(getattr(it, f) for f in fields) for it in run.iterations]


FIELDS = ("start_s", "prefill_tokens", "decode_tokens", "encoder_tokens", "kv_blocks_used", "preempted")


def test_encoder_runs_on_admission_and_cross_attention_holds_blocks():
    # block 4: a 4-token prompt is 1 block, 10 encoder outputs are 3 blocks
    reqs = [Request(0, 0.0, 4, 3, 12.0, encoder_tokens=10), Request(1, 0.0, 4, 2, 30.0, encoder_tokens=10)]
    seen = []
    run = simulate(reqs, lambda it: seen.append(it) or 1.0, num_gpu_blocks=100,
                   scheduler=SchedulerConfig(block_size=4, watermark=0.0))
    assert [(it.prefill_chunks, it.decode_contexts, it.encoder_inputs) for it in seen] == [
        (((4, 0), (4, 0)), (), (10, 10)), ((), (5, 5), ()), ((), (6,), ())]
    # 5 decoder tokens need a second block; the 3 cross-attention blocks stay until the request ends
    assert _timeline(run, *FIELDS) == [(0.0, 8, 0, 20, 8, 0), (1.0, 0, 2, 0, 10, 0), (2.0, 0, 1, 0, 5, 0)]
    assert [(r.ttft_s, r.finish_s) for r in run.requests] == [(1.0, 3.0), (1.0, 2.0)]
    s = summarize(run)
    assert (s["audio_seconds"], s["duration_s"], s["audio_seconds_per_s"]) == (42.0, 3.0, 14.0)


def test_encoder_budget_admits_one_window_per_iteration():
    reqs = [Request(i, 0.0, 4, 1, encoder_tokens=10) for i in range(3)]
    seen = []
    simulate(reqs, lambda it: seen.append(it) or 1.0, num_gpu_blocks=100,
             scheduler=SchedulerConfig(block_size=4, max_num_encoder_input_tokens=15))
    assert [it.encoder_inputs for it in seen] == [(10,), (10,), (10,)]
    seen.clear()       # the default budget is the token budget (2048 here): all three at once
    simulate(reqs, lambda it: seen.append(it) or 1.0, num_gpu_blocks=100, scheduler=SchedulerConfig(block_size=4))
    assert [it.encoder_inputs for it in seen] == [(10, 10, 10)]


def test_preemption_frees_cross_attention_blocks_and_recomputes_the_encoder():
    # each request: 1 prompt block + 2 cross blocks; 7 blocks let one grow, the other is preempted
    reqs = [Request(0, 0.0, 4, 4, encoder_tokens=8), Request(1, 0.0, 4, 4, encoder_tokens=8)]
    run = simulate(reqs, one_second, num_gpu_blocks=7, scheduler=SchedulerConfig(block_size=4, watermark=0.0))
    assert _timeline(run, *FIELDS) == [
        (0.0, 8, 0, 16, 6, 0), (1.0, 0, 1, 0, 4, 1), (2.0, 0, 1, 0, 4, 0), (3.0, 0, 1, 0, 4, 0),
        (4.0, 5, 0, 8, 4, 0), (5.0, 0, 1, 0, 4, 0), (6.0, 0, 1, 0, 4, 0)]
    r0, r1 = run.requests
    assert (r0.preemptions, r0.finish_s) == (0, 4.0)
    assert (r1.preemptions, r1.ttft_s, r1.finish_s) == (1, 1.0, 7.0)


def test_cross_attention_blocks_count_toward_rejection():
    run = simulate([Request(0, 0.0, 4, 2, encoder_tokens=10)], one_second, num_gpu_blocks=3,
                   scheduler=SchedulerConfig(block_size=4, watermark=0.0))
    assert run.requests[0].rejected == "4 KV blocks never fit in 3 (watermark 0)"


def test_chunked_prefill_refuses_an_encoder():
    with pytest.raises(ValueError, match="chunked prefill is not supported for encoder-decoder"):
        simulate([Request(0, 0.0, 4, 2, encoder_tokens=10)], one_second, num_gpu_blocks=10,
                 scheduler=SchedulerConfig.named("sarathi"))


def test_audio_splits_into_windows_with_their_share_of_the_transcript():
    reqs = trace_requests([{"arrival_s": 1.0, "prompt_tokens": 4, "output_tokens": 14, "audio_seconds": 70.0},
                           {"arrival_s": 0.0, "prompt_tokens": 4, "output_tokens": 5, "audio_seconds": 30.0},
                           {"arrival_s": 2.0, "prompt_tokens": 4, "output_tokens": 3}])
    windows = audio_windows(reqs, 30.0, 1500)
    assert [(w.request_id, w.arrival_s, w.audio_s, w.output_tokens, w.encoder_tokens) for w in windows] == [
        (0, 0.0, 30.0, 5, 1500), (1, 1.0, 30.0, 6, 1500), (2, 1.0, 30.0, 6, 1500), (3, 1.0, 10.0, 2, 1500),
        (4, 2.0, 0.0, 3, 1500)]
    assert sum(w.audio_s for w in windows) == sum(r.audio_s for r in reqs) == 100.0


def test_speech_requests_take_transcript_tokens_from_the_audio():
    reqs = speech_requests(4.0, 200, audio_s=(2.0, 30.0), seed=5)
    assert reqs == speech_requests(4.0, 200, audio_s=(2.0, 30.0), seed=5)
    audio = np.array([r.audio_s for r in reqs])
    assert audio.min() >= 2.0 and audio.max() <= 30.0 and {r.prompt_tokens for r in reqs} == {4}
    assert [r.output_tokens for r in reqs] == [max(1, round(a * TRANSCRIPT_TOKENS_PER_AUDIO_S)) for a in audio]
    assert np.diff([r.arrival_s for r in reqs]).mean() == pytest.approx(1 / 4, rel=0.2)
