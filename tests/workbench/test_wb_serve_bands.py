"""Error bands of wb.serve: per iteration kind from a profiled representative's band, propagated
through the request simulation (exact on a static batch, where every time scales with the costs)."""
import pytest
from transformers import LlamaConfig

import workbench as wb
from backend.sim.sensitivity import TimeBand
from backend.sim.serving import Request, SchedulerConfig
from workbench.serving import bands as serving_bands
from workbench.serving.service import iteration_costs

TINY = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                   num_attention_heads=8, num_key_value_heads=4)
OPTIONS = {"max_num_seqs": 4, "max_num_batched_tokens": 64}
STATIC = [Request(i, 0.0, 16, 6) for i in range(3)]          # a static batch: no arrivals to keep pace with


def test_bands_scale_a_static_batch_exactly():
    costs = iteration_costs(TINY, "h100", 1, SchedulerConfig(max_model_len=256, **OPTIONS))
    half_to_double = {kind: TimeBand(1e6, 0.5e6, 2e6) for kind in ("prefill", "decode")}
    serving_bands._BANDS[id(costs)] = (costs, half_to_double)
    try:
        s = wb.serve(TINY, STATIC, target="h100", check=False, band=True, **OPTIONS).summary
    finally:
        del serving_bands._BANDS[id(costs)]
    for metric in ("ttft_p50_s", "tpot_p50_s", "itl_p99_s"):
        assert (s[f"{metric}_low"], s[f"{metric}_high"]) == pytest.approx((0.5 * s[metric], 2 * s[metric]))
    for metric in ("throughput_tokens_per_s", "requests_per_s"):
        assert (s[f"{metric}_low"], s[f"{metric}_high"]) == pytest.approx((s[metric] / 2, 2 * s[metric]))
    assert s["usd_per_1m_tokens_low"] == pytest.approx(s["usd_per_1m_tokens"] / 2)   # the devices are held half as long


def test_bands_from_the_models_own_profiles():
    result = wb.serve(TINY, STATIC, target="h100", check=False, band=True, **OPTIONS)
    s, rows = result.summary, result.bands
    assert list(rows["kind"]) == ["prefill", "decode"]
    assert ((rows["low_s"] <= rows["nominal_s"]) & (rows["nominal_s"] <= rows["high_s"])).all()
    assert (rows["low_s"] < rows["high_s"]).all() and rows["dominant"].str.startswith("preset:").all()
    for metric in ("ttft_p90_s", "tpot_p50_s", "throughput_tokens_per_s", "usd_per_1m_tokens"):
        assert s[f"{metric}_low"] <= s[metric] <= s[f"{metric}_high"], metric
    assert s["ttft_p90_s_low"] < s["ttft_p90_s_high"]


def test_speech_bands_per_encoder_admission_and_decode():
    from transformers import WhisperConfig
    tiny_whisper = WhisperConfig(vocab_size=512, num_mel_bins=16, d_model=64, encoder_layers=2, decoder_layers=2,
                                 encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                 decoder_ffn_dim=128, max_target_positions=64, pad_token_id=0, bos_token_id=1,
                                 eos_token_id=2, decoder_start_token_id=3)
    load = wb.serving.speech_requests(2.0, 6, audio_s=(5.0, 40.0), seed=0)
    result = wb.serve(tiny_whisper, load, target="h100", check=False, band=True, max_num_seqs=4)
    s = result.summary
    assert list(result.bands["kind"]) == ["encoder", "admit", "decode"]
    for metric in ("usd_per_audio_hour", "audio_seconds_per_s", "ttft_p50_s"):
        assert s[f"{metric}_low"] <= s[metric] <= s[f"{metric}_high"], metric
    assert s["usd_per_audio_hour_low"] < s["usd_per_audio_hour_high"]
