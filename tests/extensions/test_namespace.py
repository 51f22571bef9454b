"""The namespace scopes behind the magics: copies on a device, compiled modules, restored after."""
import torch

from extensions.namespace import compiled, names_on, names_used, placed, tensors_and_modules


def test_names_used():
    assert names_used("y = model(x)\nz = f(y).sum()") == {"y", "model", "x", "z", "f"}
    assert names_used("y = (") == set()


def test_tensors_and_modules():
    ns = {"m": torch.nn.Linear(2, 2), "t": torch.ones(1), "n": 3}
    assert tensors_and_modules(ns, ["t", "n", "m", "missing"]) == ["m", "t"]


def test_placed_binds_copies_and_restores_originals():
    m, t = torch.nn.Linear(2, 2), torch.ones(2)
    ns = {"m": m, "t": t, "n": 3}
    with placed(ns, ["m", "t", "n"], "neuron") as names:
        assert names == ["m", "t"]
        assert ns["m"] is not m and ns["m"].weight.device.type == "neuron"
        assert ns["t"].device.type == "neuron" and ns["n"] == 3
        ns["t"] = "rebound by the block"
    assert ns["m"] is m and m.weight.device.type == "cpu"
    assert ns["t"] == "rebound by the block"


def test_compiled_wraps_modules_and_restores():
    m = torch.nn.Linear(2, 2)
    ns = {"m": m, "t": torch.ones(2)}
    with compiled(ns, ["m", "t", "missing"]) as names:
        assert names == ["m"]
        assert type(ns["m"]).__name__ == "OptimizedModule" and ns["m"]._orig_mod is m
    assert ns["m"] is m


def test_names_on():
    ns = {"m": torch.nn.Linear(2, 2), "bn": torch.nn.BatchNorm1d(2, affine=False),
          "empty": torch.nn.ReLU(), "t": torch.ones(2, device="neuron"), "c": torch.ones(2)}
    names = ["m", "bn", "empty", "t", "c"]
    assert names_on(ns, names, "cpu") == ["bn", "c", "m"]
    assert names_on(ns, names, "neuron") == ["t"]
