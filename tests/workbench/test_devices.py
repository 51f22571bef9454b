"""Device switching: the same unchanged code lands on cpu, neuron or emulated cuda."""
import pytest
import torch

from workbench.devices import active_device, available, move, set_device, use_device


@pytest.fixture(autouse=True)
def back_to_cpu():
    yield
    set_device("cpu")


def build():
    return torch.nn.Linear(4, 2), torch.randn(3, 4)


@pytest.mark.parametrize("device,target,expected", [
    ("cpu", None, "cpu"), ("neuron", "trn1", "neuron:0"), ("cuda", "a100", "cuda:0")])
def test_unchanged_code_lands_on_the_active_device(device, target, expected):
    set_device(device, target)
    model, x = build()
    assert str(model.weight.device) == expected and str(x.device) == expected
    assert str(model(x).device) == expected


def test_cuda_redirect_runs_on_neuron():
    state = set_device("cuda", redirect=True)
    assert torch.cuda.is_available() and state.redirect
    assert torch.zeros(1, device="cuda").device.type == "neuron"
    assert "redirected" in state.status_line()


def test_cpu_restores_torch():
    before = (torch.cuda.is_available, torch.get_default_device())
    set_device("cuda", "h100")
    set_device("cpu")
    assert (torch.cuda.is_available, torch.get_default_device()) == before
    assert not torch.cuda.is_available()


def test_use_device_restores_previous_state():
    set_device("neuron", "trn3")
    with use_device("cuda", "h200"):
        assert torch.zeros(1).device.type == "cuda"
    assert active_device().device == "neuron" and active_device().target == "trn3"
    assert torch.zeros(1).device.type == "neuron"


def test_bad_arguments_are_clear_and_change_nothing():
    set_device("neuron", "trn2")
    with pytest.raises(ValueError, match="cpu, neuron, cuda, tpu"):
        set_device("xla")
    with pytest.raises(ValueError, match="v6e"):
        set_device("tpu", "h100")
    with pytest.raises(ValueError, match="trn1"):
        set_device("neuron", "trn9")
    with pytest.raises(ValueError, match="a100"):
        set_device("cuda", "v100")
    assert active_device().device == "neuron" and torch.neuron.get_target().name == "trn2"
    assert available()["neuron"] == ["trn1", "trn2", "trn3"]


def test_move_named_models_and_tensors():
    namespace = {"model": torch.nn.Linear(2, 2), "x": torch.ones(2), "n": 3}
    assert move(namespace, ["model", "x"], "neuron") == ["model", "x"]
    assert namespace["model"].weight.device.type == "neuron" and namespace["x"].device.type == "neuron"
    with pytest.raises(ValueError, match="not a tensor or module"):
        move(namespace, ["n"], "neuron")
    with pytest.raises(ValueError, match="nothing named"):
        move(namespace, ["missing"], "neuron")


def test_move_explains_a_live_autograd_graph():
    namespace = {"model": torch.nn.Linear(2, 2)}
    # The input needs grad, so y's graph saves the weight itself for backward.
    y = namespace["model"](torch.ones(1, 2, requires_grad=True))
    with pytest.raises(RuntimeError, match="still holds its autograd graph"):
        move(namespace, ["model"], "neuron")
    del y
    move(namespace, ["model"], "neuron")
    assert namespace["model"].weight.device.type == "neuron"


def test_public_functions_are_not_shadowed_by_submodules():
    # Importing a submodule binds it on the package; none may share a public function's name.
    import importlib
    import pkgutil

    import workbench

    for info in pkgutil.iter_modules(workbench.__path__):
        importlib.import_module(f"workbench.{info.name}")
    for name in ("profile", "compare", "migration_report", "set_device", "use_device", "move", "load_trace"):
        assert callable(getattr(workbench, name)) and not isinstance(getattr(workbench, name), type(workbench)), name
