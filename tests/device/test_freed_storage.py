"""A storage freed with ``untyped_storage().resize_(0)`` (FSDP2's free) is not readable.

The host bytes are kept (a CPU kernel on a 0-byte storage would crash), so before this a read
after the free silently returned the stale values.
"""
import pytest
import torch

FREED = "storage has been freed \\(resized to 0\\)"


def test_reading_a_freed_tensor_raises(neuron):
    t = torch.arange(6.0, device=neuron)
    t.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match=FREED):
        t.cpu()
    with pytest.raises(RuntimeError, match=FREED):
        t + 1
    with pytest.raises(RuntimeError, match=FREED):
        str(t)
    assert "storage freed" in repr(t) and "5." not in repr(t)   # debuggers still get a repr


def test_a_view_of_a_freed_storage_raises_and_so_does_a_partial_free(neuron):
    base = torch.arange(8.0, device=neuron)
    view = base[4:]
    base.untyped_storage().resize_(16)        # the first four floats stay allocated
    assert base[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(RuntimeError, match="resized to 16 bytes"):
        view.sum()


def test_views_and_writes_of_a_freed_tensor_work_and_realloc_makes_it_readable(neuron):
    t = torch.zeros(2, 3, device=neuron)
    t.untyped_storage().resize_(0)
    flat = t.view(6)                          # metadata only: no bytes read
    t.copy_(torch.ones(2, 3))                 # a write, as FSDP2's all-gather does after resize_
    t.untyped_storage().resize_(24)
    flat.fill_(2.0)
    assert t.cpu().tolist() == [[2.0] * 3] * 2
