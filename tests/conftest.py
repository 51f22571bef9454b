"""Shared fixtures: every test runs with the workbench imported (device registered)."""
import gc

import pytest
import torch

import workbench  # noqa: F401  (registers the neuron device)


@pytest.fixture
def neuron():
    """A fresh default target and clean memory books for one test."""
    torch.neuron.set_target("trn2")
    gc.collect()
    torch.neuron.reset_peak_memory_stats()
    yield torch.device("neuron")
    torch.neuron.set_target("trn2")
