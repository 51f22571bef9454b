"""Hugging Face ``Trainer`` on ``neuron``, unchanged: a tiny Llama causal LM trained for a few
steps with ``ACCELERATE_TORCH_DEVICE=neuron`` (what the autoload sets when
``$WORKBENCH_DEVICE=neuron`` asks for the device, docs/stack.md) stays on ``neuron`` and logs the
losses of the same run on CPU. Without it, accelerate and transformers (which recognise
``neuron`` only with AWS's torch_neuronx) put the run on CPU."""
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from accelerate.state import AcceleratorState  # noqa: E402

HF_DEVICE_ENV = "ACCELERATE_TORCH_DEVICE"


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int = 16, length: int = 16, vocab: int = 128):
        self.ids = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _train(output_dir) -> tuple[str, str, list[float]]:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config)
    args = transformers.TrainingArguments(output_dir=str(output_dir), per_device_train_batch_size=4, max_steps=3,
                                          logging_steps=1, learning_rate=1e-3, report_to=[], save_strategy="no",
                                          seed=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return args.device.type, next(model.parameters()).device.type, losses


@pytest.fixture
def fresh_accelerate_state():
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_trainer_trains_on_neuron_with_the_losses_of_cpu(neuron, tmp_path, monkeypatch, fresh_accelerate_state):
    monkeypatch.delenv(HF_DEVICE_ENV, raising=False)
    on_cpu = _train(tmp_path / "cpu")
    monkeypatch.setenv(HF_DEVICE_ENV, "neuron")
    on_neuron = _train(tmp_path / "neuron")
    assert on_cpu[:2] == ("cpu", "cpu") and on_neuron[:2] == ("neuron", "neuron")
    assert len(on_cpu[2]) == 3 and on_neuron[2] == on_cpu[2]
