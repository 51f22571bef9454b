"""FSDP gradient reduction of a TPU slice: the shared ring model's bandwidth term at half the
bidirectional ICI figure, left on the step only when the TensorCore runs it."""
from __future__ import annotations

import dataclasses

import pytest

from backend.sim.tpu import v6e
from backend.sim.tpu.collectives import exposed_gradient_reduction_ns, slice_topology


def test_reduce_scatter_moves_all_but_its_own_shard_at_one_direction_of_the_ici():
    # 255/256 of 256 MB at 400 GB/s (800 GB/s bidirectional / 2)
    assert exposed_gradient_reduction_ns(v6e, 256_000_000, 256) == pytest.approx(637_500.0)
    assert slice_topology(v6e, 256).intra_bytes_per_s == 400e9


def test_only_the_exposed_share_counts_and_none_when_offloaded_or_alone():
    half = dataclasses.replace(v6e, gradient_reduction_exposed=0.5)
    assert exposed_gradient_reduction_ns(half, 256_000_000, 256) == pytest.approx(318_750.0)
    offloaded = dataclasses.replace(v6e, gradient_reduction_on_sparsecore=True)
    assert exposed_gradient_reduction_ns(offloaded, 256_000_000, 256) == 0.0
    assert exposed_gradient_reduction_ns(v6e, 256_000_000, 1) == 0.0


def test_a_slice_fits_in_one_pod():
    with pytest.raises(ValueError, match="1 to 256 chips"):
        slice_topology(v6e, 512)
    with pytest.raises(ValueError, match="fraction"):
        dataclasses.replace(v6e, gradient_reduction_exposed=1.5)
