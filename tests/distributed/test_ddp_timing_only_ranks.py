"""DDP on two real ``neuron`` ranks (torchrun) with timing-only tensors: a model built in the
mode, and a model with values fed a timing-only batch. Construction moves no values (the
parameters' broadcast and shape check skip the exchange alike on every rank), the step's
gradient all-reduce is priced, and nothing is left holding values it does not have: the loss,
the gradients and the updated weights raise when read."""
import pytest

from installed import installed_environment, torchrun

pytestmark = pytest.mark.slow      # starts torchrun and two ranks


def test_ddp_steps_timing_only_on_two_real_ranks(tmp_path):
    out = torchrun("ddp_timing_only_script.py", installed_environment(tmp_path))
    for case in ("timing_only_model", "real_weights"):
        step = out[case]
        assert step["collectives"] == ["all_reduce"] and step["total_time"] > 0, case
        assert not step["loss_readable"] and not any(step["weights_have_values"]), case
    assert not any(out["real_weights"]["grads_have_values"])
