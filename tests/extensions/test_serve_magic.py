"""%neuron_serve: a tiny Llama config's load on two targets, option parsing and errors."""
import pytest
from IPython.core.error import UsageError
from transformers import LlamaConfig

import workbench as wb

TINY = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                   num_attention_heads=8, num_key_value_heads=4)


def test_serve_magic_matches_wb_serve_on_each_target(shell):
    shell.user_ns["config"] = TINY
    shell.user_ns["load"] = wb.serving.poisson_requests(20.0, 10, prompt_tokens=32, output_tokens=4)
    results = shell.run_line_magic("neuron_serve", "config load -t h100,v6e --slo ttft=0.5,tpot=0.1 --eager -o -q")
    assert set(results) == {"h100", "v6e"}
    direct = wb.serve(TINY, shell.user_ns["load"], target="h100", slo={"ttft_s": 0.5, "tpot_s": 0.1},
                      compiled=False)
    assert results["h100"].summary["ttft_p50_s"] == direct.summary["ttft_p50_s"]
    assert results["v6e"].summary["slo"] == '{"ttft_s": 0.5, "tpot_s": 0.1}'
    assert not results["h100"].summary["compiled"]


@pytest.mark.parametrize("line, message", [
    ("missing --rate 1", "'missing' is not defined"),
    ("config", "either a requests name or --rate"),
    ("config --rate 1 -t h999", "unknown"),
    ("config --rate 1 --slo latency=1", "--slo takes"),
])
def test_serve_magic_usage_errors(shell, line, message):
    shell.user_ns["config"] = TINY
    with pytest.raises(UsageError, match=message):
        shell.run_line_magic("neuron_serve", line)


def test_serve_magic_speech_load_with_bands(shell):
    from transformers import WhisperConfig

    from extensions.serve_magics import _columns
    shell.user_ns["whisper"] = WhisperConfig(
        vocab_size=512, num_mel_bins=16, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_target_positions=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=3)
    result = shell.run_line_magic("neuron_serve", "whisper --rate 2 --count 4 --audio 45 -t h100 --band -o -q")
    s = result.summary
    assert (s["requests"], s["audio_seconds"]) == (8, 180.0)                # 45 s: two 30 s windows each
    assert s["usd_per_audio_hour_low"] <= s["usd_per_audio_hour"] <= s["usd_per_audio_hour_high"]
    assert {"audio_seconds_per_s", "usd_per_audio_hour_high", "ttft_p90_s_low"} <= set(_columns(s))
