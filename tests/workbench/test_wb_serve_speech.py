"""wb.serve on a tiny Whisper (Hugging Face WhisperConfig, built timing-only) on neuron, cuda and tpu
targets: encoder once per 30 s window, cross-attention K/V in the KV cache, audio totals and prices."""
import math

import pandas as pd
import pytest
from transformers import WhisperConfig

import workbench as wb
from backend.sim.pricing import price
from backend.sim.serving import Iteration, SchedulerConfig
from workbench.serving.encoder_decoder import speech_shape
from workbench.serving.service import activation_bytes, iteration_costs

TINY = WhisperConfig(vocab_size=512, num_mel_bins=16, d_model=64, encoder_layers=2, decoder_layers=3,
                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                     max_source_positions=1500, max_target_positions=64, pad_token_id=0, bos_token_id=1,
                     eos_token_id=2, decoder_start_token_id=3)
OPTIONS = {"max_num_seqs": 4, "max_num_encoder_input_tokens": 3000}      # two windows per pass


@pytest.fixture(scope="module")
def trace():
    return pd.DataFrame({"arrival_s": [0.0, 0.0, 0.5, 1.0], "prompt_tokens": [4, 4, 4, 4],
                         "output_tokens": [20, 6, 9, 30], "audio_seconds": [45.0, 12.0, 30.0, 8.5]})


@pytest.mark.parametrize("target", [pytest.param("trn2", marks=pytest.mark.slow), "h100",
                                    pytest.param("v6e", marks=pytest.mark.slow)])
def test_serve_tiny_whisper(target, trace):
    result = wb.serve(TINY, trace, target=target, tp=2, slo={"ttft_s": 10.0}, **OPTIONS)
    s = result.summary
    assert (s["model_kind"], s["requests"], s["completed"]) == ("encoder-decoder", 5, 5)   # 45 s: two windows
    assert s["audio_seconds"] == 95.5 and s["audio_seconds_per_s"] == pytest.approx(95.5 / s["duration_s"])
    usd = price(target).usd_per_device_hour * 2 * s["duration_s"] / 3600
    assert s["usd_per_audio_hour"] == pytest.approx(usd / (95.5 / 3600))
    for key in ("ttft_p50_s", "tpot_p50_s", "throughput_tokens_per_s", "usd_per_1m_tokens"):
        assert math.isfinite(s[key]) and s[key] > 0, key
    # the first pass admits the two windows arriving at 0 (the budget's two encoder windows)
    costs = iteration_costs(TINY, target, 2, SchedulerConfig(max_model_len=64, **OPTIONS))
    first = result.timeline.iloc[0]
    assert (first["encoder_tokens"], first["prefill_tokens"], first["batch_size"]) == (3000, 8, 2)
    assert first["duration_s"] == pytest.approx(costs(Iteration(((4, 0), (4, 0)), (), (1500, 1500))))
    assert first["encoder_s"] == pytest.approx(costs.encoder_s(2)) and 0 < first["encoder_s"] < first["duration_s"]
    # per window: one block for the prompt, 1,500 / 16 -> 94 blocks of cross-attention K/V
    assert first["kv_blocks_used"] == 2 * (1 + 94)
    assert result.timeline["encoder_tokens"].sum() == 5 * 1500          # each window's encoder ran once
    assert first["communication_s"] == pytest.approx(costs.communication_s(2, 8, 0)) and first["communication_s"] > 0
    assert (result.interpolation["error_percent"].abs() < 10).all()


def test_kv_cache_holds_decoder_layers_of_self_and_cross_attention(trace):
    result = wb.serve(TINY, trace, target="h100", tp=2, check=False, **OPTIONS)
    shape = speech_shape(TINY)
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim) == (3, 4, 16)
    free = wb.target("h100").hbm_bytes * 0.9 - shape.num_params * 2 / 2 - activation_bytes(shape, 2, 3000, 4)
    per_block = 16 * 2 * 3 * (4 // 2) * 16 * 2      # block x (K, V) x decoder layers x heads here x head_dim x bf16
    assert result.summary["num_gpu_blocks"] == int(free // per_block)


def test_encoder_decoder_refuses_chunked_prefill(trace):
    with pytest.raises(ValueError, match="chunked prefill is not supported for encoder-decoder"):
        wb.serve(TINY, trace, target="h100", scheduler="sarathi")


def test_a_trace_of_arrivals_and_audio_alone():
    from workbench.serving.service import _requests
    reqs = _requests(pd.DataFrame({"arrival_s": [0.0, 2.0], "audio_seconds": [10.0, 0.1]}), speech=True)
    assert [(r.prompt_tokens, r.output_tokens, r.audio_s) for r in reqs] == [(4, 33, 10.0), (4, 1, 0.1)]
