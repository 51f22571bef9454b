"""The device generators' states are CUDA-shaped, 16 bytes of (seed, offset), as DTensor's RNG
tracker reads them, while the values still come from the host generator (equal to CPU's)."""
import pickle

import pytest
import torch
from torch.distributed.tensor._random import _PhiloxState
from torch.utils.checkpoint import checkpoint

from backend.device.rng_state import POSITIONS


def _seed_offset(state: torch.Tensor) -> tuple[int, int]:
    philox = _PhiloxState(state.clone())
    return int(philox.seed.item()), int(philox.offset.item())


def test_the_state_after_manual_seed_is_the_seed_at_offset_zero(neuron):
    torch.manual_seed(1234)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.shape == (16,)
    assert _seed_offset(state) == (1234, 0)
    assert len(torch.neuron.get_rng_state_all()) == torch.neuron.device_count()


def test_an_offset_is_host_draws_past_the_position(neuron):
    torch.manual_seed(7)
    reference = torch.rand(40)
    for offset in (0, 4, 12, 33):
        philox = _PhiloxState(torch.neuron.get_rng_state())
        philox.seed = torch.tensor([7], dtype=torch.uint64)
        philox.offset = torch.tensor([offset])
        torch.neuron.set_rng_state(philox.state)
        assert torch.equal(torch.rand(40 - offset, device=neuron).cpu(), reference[offset:])


def test_shards_drawn_at_their_offsets_make_the_whole_tensor(neuron):
    # What DTensor's tracker does for a random op on a tensor sharded over two ranks.
    torch.manual_seed(0)
    whole = torch.empty(64, 16).normal_()
    torch.manual_seed(0)
    start = torch.neuron.get_rng_state()
    shards = []
    for rank in range(2):
        philox = _PhiloxState(start.clone())
        philox.offset = philox.offset + rank * 32 * 16
        torch.neuron.set_rng_state(philox.state)
        shards.append(torch.empty(32, 16, device=neuron).normal_().cpu())
    assert torch.equal(torch.cat(shards), whole)


def test_a_state_read_anywhere_restores_the_stream_exactly(neuron):
    torch.manual_seed(3)
    torch.randn(3, device=neuron)          # leaves a cached normal sample in the host generator
    state = torch.neuron.get_rng_state()
    first = (torch.randn(5, device=neuron).cpu(), torch.rand(7, device=neuron).cpu())
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.randn(5, device=neuron).cpu(), first[0])
    assert torch.equal(torch.rand(7, device=neuron).cpu(), first[1])
    torch.neuron.set_rng_state_all([state] * torch.neuron.device_count())
    assert torch.equal(torch.randn(5, device=neuron).cpu(), first[0])


def test_device_draws_still_equal_cpu_draws(neuron):
    torch.manual_seed(11)
    cpu = (torch.randn(20), torch.rand(3), torch.randint(0, 9, (6,)))
    torch.manual_seed(11)
    torch.neuron.set_rng_state(torch.neuron.get_rng_state())    # reading and setting changes nothing
    dev = (torch.randn(20, device=neuron), torch.rand(3, device=neuron), torch.randint(0, 9, (6,), device=neuron))
    assert all(torch.equal(c, d.cpu()) for c, d in zip(cpu, dev))


def test_the_cpu_state_is_still_accepted_and_bad_states_raise(neuron):
    torch.manual_seed(5)
    cpu_state = torch.get_rng_state()
    a = torch.rand(4, device=neuron)
    torch.neuron.set_rng_state(cpu_state)
    assert torch.equal(torch.rand(4, device=neuron).cpu(), a.cpu())
    with pytest.raises(TypeError, match="ByteTensor"):
        torch.neuron.set_rng_state(torch.zeros(2, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="never read"):
        torch.neuron.set_rng_state(torch.tensor([-2, 0]).view(torch.uint8))   # an unknown position key
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.neuron.set_rng_state(torch.tensor([1, -4]).view(torch.uint8))
    assert torch.rand(2, device=neuron).device.type == "neuron"          # still usable


def test_a_device_generator_has_the_same_state_shape_and_pickles(neuron):
    g = torch.Generator("neuron").manual_seed(9)
    assert _seed_offset(g.get_state()) == (9, 0)
    torch.rand(3, device=neuron, generator=g)
    state = g.get_state()
    a = torch.rand(4, device=neuron, generator=g)
    g.set_state(state)
    assert torch.equal(torch.rand(4, device=neuron, generator=g).cpu(), a.cpu())
    POSITIONS.clear()                      # a pickled generator carries its full host state
    clone = pickle.loads(pickle.dumps(g))
    assert torch.equal(torch.rand(4, device=neuron, generator=clone).cpu(),
                       torch.rand(4, device=neuron, generator=g).cpu())


def test_checkpointed_dropout_recomputes_the_same_mask_as_on_cpu(neuron):
    def run(device):
        torch.manual_seed(0)
        layer = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).to(device)
        x = torch.randn(4, 8, device=device, requires_grad=True)
        y = checkpoint(layer, x, use_reentrant=False)
        y.sum().backward()
        return y.detach().cpu(), x.grad.cpu()
    for ours, cpu in zip(run(neuron), run("cpu")):
        assert torch.equal(ours, cpu)


def test_the_emulated_cuda_module_shares_the_state_shape(neuron):
    from backend.device.cuda_emulation import emulate_cuda

    with emulate_cuda():
        torch.cuda.manual_seed(21)
        assert _seed_offset(torch.cuda.get_rng_state()) == (21, 0)
        assert len(torch.cuda.get_rng_state_all()) == torch.cuda.device_count()
