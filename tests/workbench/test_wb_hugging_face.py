"""``wb.set_device`` tells Hugging Face where the model runs: ``TrainingArguments`` (and
``accelerate``) pick ``neuron`` after ``wb.set_device("neuron")`` (or a TPU, which runs on it) and
CPU after ``wb.set_device("cpu")``, through ``$ACCELERATE_TORCH_DEVICE``; a value the user set is
left alone. The training itself: tests/device/test_hugging_face_trainer.py."""
import os

import pytest

import workbench as wb

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from accelerate.state import AcceleratorState  # noqa: E402

HF_DEVICE_ENV = "ACCELERATE_TORCH_DEVICE"


def _trainer_device(tmp_path) -> str:
    AcceleratorState._reset_state(reset_partial_state=True)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[])
    return args.device.type


@pytest.fixture
def clean(monkeypatch):
    monkeypatch.delenv(HF_DEVICE_ENV, raising=False)
    yield
    wb.set_device("cpu")
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.mark.parametrize("device", ["neuron", "tpu"])
def test_trainer_follows_the_active_device(clean, tmp_path, device):
    assert _trainer_device(tmp_path) == "cpu"
    wb.set_device(device)
    assert _trainer_device(tmp_path) == "neuron"
    wb.set_device("cpu")
    assert _trainer_device(tmp_path) == "cpu"


def test_a_device_the_user_chose_for_hugging_face_stays(clean, tmp_path, monkeypatch):
    monkeypatch.setenv(HF_DEVICE_ENV, "cpu")
    wb.set_device("neuron")
    assert _trainer_device(tmp_path) == "cpu"
    wb.set_device("cpu")
    assert os.environ[HF_DEVICE_ENV] == "cpu"
