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
