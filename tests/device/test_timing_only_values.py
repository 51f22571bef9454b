"""Timing-only mode's rule for values: small new tensors (masks, ids, scalars) keep exact values,
larger ones and everything computed from them hold none, and a data-free result written into a
tensor with values takes them away. Every read is exact or raises."""
import pytest
import torch
from torch import nn

import workbench as wb
from backend.device.timing_only import DEFAULT_VALUES_UP_TO, STATE, TimingOnlyError

LIMIT = DEFAULT_VALUES_UP_TO


@pytest.fixture(autouse=True)
def _fresh(neuron):
    STATE.reset()
    yield
    STATE.reset()


def _has_values(t) -> bool:
    return not t._inner.is_meta


def test_new_tensors_keep_values_up_to_the_limit():
    with torch.device("neuron"), torch.neuron.timing_only():
        small = [torch.ones(LIMIT), torch.arange(LIMIT), torch.zeros(8, 8), torch.tensor([1, 2, 3]),
                 torch.full((), 7.0), torch.eye(4), torch.randint(0, 10, (64, 512))]
        large = [torch.ones(LIMIT + 1), torch.arange(LIMIT + 1), torch.randn(768, 768), torch.eye(300)]
        moved = torch.ones(3).to("neuron"), torch.ones(LIMIT + 1).to("neuron")
    assert all(_has_values(t) for t in small) and not any(_has_values(t) for t in large)
    assert _has_values(moved[0]) and not _has_values(moved[1])
    assert small[1].sum().item() == LIMIT * (LIMIT - 1) // 2     # exact, as without the mode
    with torch.neuron.timing_only(values_up_to=0):
        assert not _has_values(torch.ones(1, device="neuron"))
    assert STATE.values_up_to == LIMIT                              # the limit comes back too


def test_the_limit_is_checked():
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="values_up_to must be a number of elements"):
            torch.neuron.set_timing_only(True, values_up_to=bad)
    assert not torch.neuron.is_timing_only()


def test_values_are_exact_or_the_read_raises():
    """One program, with and without the mode: every read the timing-only run answers equals
    the run with values; the others raise."""
    def program():
        torch.manual_seed(0)
        with torch.device("neuron"):
            weight = torch.randn(512, 512)                 # data-free in the mode
            mask = torch.ones(4, 16, dtype=torch.long)
            mask[1, 10:] = 0
            positions = torch.arange(16).expand(4, 16)
            lengths = mask.sum(-1)
            hidden = torch.randn(4, 16, 512) @ weight
            reads = {
                "all": lambda: bool(mask.all()),
                "lengths": lambda: lengths.tolist(),
                "last": lambda: positions[mask.bool()].max().item(),
                "nonzero": lambda: mask.nonzero().shape,
                "masked": lambda: (hidden * mask[..., None]).sum().item(),
                "weight": lambda: weight[0, 0].item(),
            }
            out = {}
            for name, read in reads.items():
                try:
                    out[name] = read()
                except TimingOnlyError:
                    out[name] = TimingOnlyError
            return out

    with_values = program()
    with torch.neuron.timing_only():
        timing_only = program()
    assert timing_only["masked"] is TimingOnlyError and timing_only["weight"] is TimingOnlyError
    for name, value in timing_only.items():
        assert value is TimingOnlyError or value == with_values[name], name
    assert [n for n, v in timing_only.items() if v is not TimingOnlyError] == ["all", "lengths", "last", "nonzero"]


def test_a_result_of_a_data_free_tensor_holds_no_values():
    with torch.device("neuron"), torch.neuron.timing_only():
        weight = torch.randn(LIMIT + 1)
    scalar = weight.sum() * torch.ones((), device="neuron")
    assert not _has_values(scalar)
    with pytest.raises(TimingOnlyError):
        scalar.item()


def test_real_weights_fed_timing_only_inputs():
    """A model with values, a timing-only batch: the output and the gradients are data-free, and
    an optimizer step takes the weights' values away instead of leaving stale ones."""
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 8)).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    with torch.neuron.timing_only():
        x = torch.randn(512, 256, device="neuron")          # above the limit: data-free
    out = model(x)
    out.sum().backward()
    assert not _has_values(out) and not any(_has_values(p.grad) for p in model.parameters())
    opt.step()
    for p in model.parameters():
        with pytest.raises(TimingOnlyError, match="lost them to .* writing a timing-only result"):
            p.sum().item()


def test_trunc_normal_on_data_free_tensors_draws_nothing():
    with torch.device("neuron"), torch.neuron.timing_only():
        big = nn.init.trunc_normal_(torch.empty(768, 768), std=0.02)
        small = nn.init.trunc_normal_(torch.empty(1, 1, 768), std=0.02, a=-0.03, b=0.03)
    assert not _has_values(big) and big.shape == (768, 768)
    assert _has_values(small) and small.abs().max().item() <= 0.03


def test_the_profile_counts_what_kept_values():
    with torch.device("neuron"), torch.neuron.timing_only():
        weight = torch.randn(512, 512)
    with wb.profile(timing_only=True) as prof:
        mask = torch.ones(8, 128, device="neuron", dtype=torch.bool)
        ids = torch.arange(128, device="neuron")
        if mask.all():
            (weight[ids] * mask[0, :, None]).sum()
    kept = prof.meta["timing_only_values"]
    assert kept["tensors"] == 2 and kept["bytes"] == 8 * 128 + 128 * 8 and kept["ops"] >= 1
    assert prof.summary["values"].startswith("none") and "2 small tensors (2,048 bytes)" in prof.summary["values"]
    with wb.profile(timing_only=True) as data_free:
        weight.sum()
    assert data_free.summary["values"] == "none (timing-only: shapes, no values)"
