"""wb.serve_sweep over rate x target x tp x replicas on a tiny Llama, and the cheapest configuration
meeting an SLO (in-process: parallel=False)."""
import pytest
from transformers import LlamaConfig

import workbench as wb

TINY = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                   num_attention_heads=8, num_key_value_heads=4)


def test_sweep_rows_and_cheapest_configuration():
    grid = {"rate_per_s": [20.0, 200.0], "target": ["h100", "v6e"], "tp": [1], "replicas": [1, 2]}
    frame = wb.serve_sweep(TINY, grid, requests={"count": 20, "prompt_tokens": 32, "output_tokens": 8},
                           slo={"ttft_s": 0.01}, parallel=False, progress=False, max_num_seqs=4,
                           max_num_batched_tokens=64, check=False, compiled=False)
    assert len(frame) == 8
    assert list(frame[["rate_per_s", "target", "replicas"]].itertuples(index=False, name=None))[:4] == [
        (20.0, "h100", 1), (20.0, "h100", 2), (20.0, "v6e", 1), (20.0, "v6e", 2)]
    assert (frame["devices"] == frame["tp"] * frame["replicas"]).all()
    best = wb.serving.cheapest(frame, min_slo_attainment=0.0)
    assert list(best["rate_per_s"]) == [20.0, 200.0]
    for _, row in best.iterrows():
        same_rate = frame[frame["rate_per_s"] == row["rate_per_s"]]
        assert row["usd_per_1m_tokens"] == same_rate["usd_per_1m_tokens"].min()
    assert wb.serving.cheapest(frame, min_slo_attainment=1.01).empty


def test_a_configuration_that_does_not_fit_is_a_row_with_the_reason():
    big = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32)      # 13.5 GB of bf16 weights
    frame = wb.serve_sweep(big, {"rate_per_s": [1.0], "target": ["trn2"], "tp": [1]},
                           requests={"count": 2, "prompt_tokens": 16, "output_tokens": 2}, parallel=False,
                           progress=False, check=False, compiled=False)
    assert "no memory left for the KV cache" in frame["error"][0]
    assert wb.serving.cheapest(frame, min_slo_attainment=0.0).empty


def test_sweep_needs_rates():
    with pytest.raises(ValueError, match="rate_per_s"):
        wb.serve_sweep(TINY, {"target": ["h100"]}, requests={"count": 2})
