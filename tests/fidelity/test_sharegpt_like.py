"""The ShareGPT-like load of the JetStream serving row: JetStream's filter holds and the kept
lengths have ShareGPT's means."""
import numpy as np
import pytest

from benchmarks.fidelity.serving import _SHAREGPT_MEAN_TOKENS, sharegpt_like_requests


def test_sharegpt_like_lengths_pass_jetstreams_filter_with_sharegpts_means():
    reqs = sharegpt_like_requests(2000)
    assert reqs == sharegpt_like_requests(2000) and len(reqs) == 2000
    prompt = np.array([r.prompt_tokens for r in reqs])
    output = np.array([r.output_tokens for r in reqs])
    assert prompt.min() >= 4 and prompt.max() <= 1024 and output.min() >= 4 and (prompt + output).max() <= 2048
    assert (prompt.mean(), output.mean()) == pytest.approx(_SHAREGPT_MEAN_TOKENS, rel=0.03)
    assert np.median(prompt) < prompt.mean()              # a long tail, as ShareGPT's
    assert {r.arrival_s for r in reqs} == {0.0}
