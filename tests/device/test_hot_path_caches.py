"""The per-op caches of the device's hot path keep answers identical to uncached ones."""
import gc
import weakref

import torch

from backend import recording
from backend.device import memory
from backend.device.tensor import wrap
from backend.sim.descriptors import TensorDesc


class ListSink:
    def __init__(self):
        self.records = []

    def feed(self, record):
        self.records.append(record)


def test_op_facts_cache_rebuilds_when_an_id_is_reused():
    built = []
    cache = recording.OpFactsCache(lambda func: built.append(func) or len(built))
    first, second = object(), object()
    assert cache.of(first) == 1 and cache.of(first) == 1
    # Pretend ``second`` was born at ``first``'s address after ``first`` died.
    cache[id(second)] = cache.pop(id(first))
    assert cache.of(second) == 2 and built == [first, second]


def test_tensor_desc_matches_its_tensor_and_is_shared():
    t = torch.randn(3, 4).t()
    desc = recording.tensor_desc(t)
    assert desc == TensorDesc((4, 3), "float32", (1, 4))
    assert type(desc.shape) is tuple and type(desc.strides) is tuple
    assert recording.tensor_desc(torch.empty(3, 4).t()) is desc
    assert recording.tensor_desc(torch.empty(4, 3, dtype=torch.float16)).dtype == "float16"
    sparse = torch.eye(3).to_sparse()
    assert recording.tensor_desc(sparse) == TensorDesc((3, 3), "float32", None)


def test_tensor_desc_cache_stays_bounded(monkeypatch):
    monkeypatch.setattr(recording, "_DESCS_MAX", 8)
    for n in range(1, 40):
        recording.tensor_desc(torch.empty(n))
    assert len(recording._DESCS) <= 8


def test_active_sinks_follow_subscriptions_and_release_closed_sinks(neuron):
    x = torch.randn(4, device="neuron")
    first, second = ListSink(), ListSink()
    with recording.recording(first):
        x + 1
        with recording.recording(second):
            x + 1
        x + 1
    assert len(first.records) == 3 and len(second.records) == 1
    ref = weakref.ref(first)
    del first
    gc.collect()
    assert ref() is None, "the op stream still holds a closed sink"


def test_memory_books_balance_over_many_ops(neuron):
    pool = memory.memory_for("neuron")
    x = torch.randn(1000, device="neuron")
    before = (pool.allocated_bytes, pool.reserved_bytes, len(pool._refs))
    for _ in range(10):
        y = x + 1
    del y
    gc.collect()
    assert (pool.allocated_bytes, pool.reserved_bytes, len(pool._refs)) == before
    kept = wrap(torch.empty(300_000), x.device)   # 1.2 MB: reserved rounds up to 2 MiB
    assert pool.allocated_bytes - before[0] == 1_200_000
    assert pool.reserved_bytes - before[1] == 2 << 20
    del kept
    gc.collect()
    assert (pool.allocated_bytes, pool.reserved_bytes) == before[:2]
