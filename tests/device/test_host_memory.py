"""Host memory of a training step on ``neuron`` against the same step on CPU: building a
16 x 2048^2 MLP (256 MiB of weights) and training it one AdamW step peaks at no more than 1.1x
the host RSS of CPU (``benchmarks.device_overhead.training_step_rss``, one fresh interpreter per
device): the device holds each value once, in its host tensor, with no shadow copies, and its
books, caches and records stay small beside the model."""
import sys

import pytest

from benchmarks.device_overhead import training_step_rss

pytestmark = [pytest.mark.slow,      # two fresh interpreters
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")]


def test_a_training_step_peaks_within_a_tenth_of_cpus_host_memory():
    cpu, neuron = training_step_rss("cpu"), training_step_rss("neuron")
    assert cpu["peak_mib"] > 3 * 256        # weights, gradients, two AdamW moments: it measured the step
    assert neuron["peak_mib"] <= 1.1 * cpu["peak_mib"], (neuron, cpu)
