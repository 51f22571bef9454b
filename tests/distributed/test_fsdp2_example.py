"""pytorch/examples' FSDP2 form on two real ``neuron`` ranks started by torchrun
(``fsdp2_example.py``): the meta-device init, sharded and drawn through DTensor's RNG tracker
(CUDA-shaped generator states), gives the same model as initialising it whole, so it trains to
the same losses as two CPU gloo ranks; so does a CPU-built model that ``fully_shard`` moves to
the device (``param.data = param.to(device)``). The trained weights load back into fresh
sharded models through the DTensor and DCP APIs."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.distributed import _free_port

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("fsdp2_example.py")


def _torchrun(out: Path, *flags: str, device: str) -> list[dict]:
    """Run the script on two torchrun ranks: ``WORKBENCH_DEVICE=neuron`` makes ``neuron`` their
    accelerator (docs/stack.md); without it they are CPU gloo ranks."""
    out.mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(_free_port()), str(SCRIPT), "--out", str(out), *flags]
    env = {k: v for k, v in os.environ.items() if k != "WORKBENCH_DEVICE"}
    if device == "neuron":
        env["WORKBENCH_DEVICE"] = "neuron"
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


def _assert_same_training(runs, reference):
    for run in runs:
        assert [r["device"] for r in run] == ["neuron:0", "neuron:1"]   # each rank its own core
        assert run[0]["param_type"] == "DeviceTensor"
        assert all(r["reloaded"] == {"dtensor": True, "dcp": True} for r in run)
        for ours, cpu in zip(run, reference):
            assert ours["losses"] == cpu["losses"]
        state, cpu_state = run[0]["state_dict"], reference[0]["state_dict"]
        assert state.keys() == cpu_state.keys()
        for name, value in state.items():
            assert value.device.type == "cpu"                            # cpu_offload=True
            torch.testing.assert_close(value, cpu_state[name], rtol=0, atol=0, msg=name)
    assert reference[0]["device"] == "cpu"


def test_the_fsdp2_example_trains_on_neuron_ranks_like_cpu_gloo_ranks(tmp_path):
    reference = _torchrun(tmp_path / "cpu", "--init", "unsharded", device="cpu")
    meta = _torchrun(tmp_path / "meta", "--init", "meta", device="neuron")
    built = _torchrun(tmp_path / "built", "--init", "cpu", device="neuron")
    _assert_same_training([meta, built], reference)
    # The ranks drew different shards: a sharded init that drew the same values on each rank
    # would have repeated rows.
    embedding = meta[0]["state_dict"]["tok_embeddings.weight"]
    assert not torch.equal(embedding[:32], embedding[32:])


def test_the_fsdp2_example_with_bf16_mixed_precision_and_explicit_prefetching(tmp_path):
    options = ("--mixed-precision", "--explicit-prefetching")
    reference = _torchrun(tmp_path / "cpu", "--init", "unsharded", *options, device="cpu")
    _assert_same_training([_torchrun(tmp_path / "meta", "--init", "meta", *options, device="neuron")], reference)
