"""Saving a model from ``neuron`` the way the Hugging Face stack does: safetensors'
``save_file``, ``save_pretrained`` / ``from_pretrained`` and accelerate's ``save_state`` /
``load_state``. They find shared storages by address (``untyped_storage().data_ptr()`` and
``nbytes()``), so a device storage reports the address and size of the host bytes it keeps."""
import pytest
import torch

safetensors_torch = pytest.importorskip("safetensors.torch")


def _mlp(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(device)


def _equal_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


# --- storage addresses ---------------------------------------------------------------------

def test_a_device_storage_has_a_real_address_that_views_share(neuron):
    t = torch.arange(12., device=neuron).reshape(4, 3)
    base = t.untyped_storage().data_ptr()
    assert base != 0 and t.data_ptr() == base
    # Views: the base's address and size, the element offset added to data_ptr, as on CPU.
    cpu = torch.arange(12.).reshape(4, 3)
    for view in (lambda x: x[1:], lambda x: x[:, 2], lambda x: x.t(), lambda x: x.view(-1)[5:7]):
        v, c = view(t), view(cpu)
        assert v.untyped_storage().data_ptr() == base
        assert v.untyped_storage().nbytes() == c.untyped_storage().nbytes() == 48
        assert v.data_ptr() - base == c.data_ptr() - cpu.data_ptr()
    other = torch.zeros(4, 3, device=neuron)
    assert other.untyped_storage().data_ptr() not in (0, base)
    assert t.clone().data_ptr() != base


def test_an_address_is_stable_while_the_storage_lives(neuron):
    t = torch.zeros(8, device=neuron)
    ptr = t.data_ptr()
    t.add_(1)
    t[2:4].mul_(3)
    assert t.data_ptr() == ptr == t.untyped_storage().data_ptr()


def test_a_freed_storage_reports_no_bytes_and_no_address_until_reallocated(neuron):
    t = torch.ones(16, device=neuron)
    storage = t.untyped_storage()
    storage.resize_(0)
    assert storage.nbytes() == storage.size() == 0 and storage.data_ptr() == 0
    storage.resize_(64)
    assert storage.nbytes() == 64 and storage.data_ptr() != 0


def test_a_timing_only_tensor_still_has_no_address(neuron):
    with torch.neuron.timing_only():
        t = torch.empty(2**17, device=neuron)     # above the size that keeps values
    with pytest.raises(RuntimeError):
        t.untyped_storage().data_ptr()


# --- safetensors ----------------------------------------------------------------------------

def test_safetensors_save_file_round_trips_a_device_state_dict(neuron, tmp_path):
    model = _mlp(neuron)
    safetensors_torch.save_file(model.state_dict(), tmp_path / "m.safetensors")
    loaded = safetensors_torch.load_file(tmp_path / "m.safetensors")
    assert _equal_state(loaded, model.state_dict())
    fresh = _mlp("cpu").to(neuron)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(loaded)
    assert _equal_state(fresh.state_dict(), model.state_dict())
    assert next(fresh.parameters()).device.type == "neuron"


def test_safetensors_finds_tied_and_overlapping_device_tensors_as_on_cpu(neuron, tmp_path):
    for device in ("cpu", neuron):
        w = torch.randn(6, 4, device=device)
        # Tied (one tensor twice) and overlapping views: refused, as on CPU.
        for shared in ({"a": w, "b": w}, {"a": w[:4], "b": w[2:]}):
            with pytest.raises(RuntimeError, match="share memory"):
                safetensors_torch.save_file(shared, tmp_path / "x.safetensors")
        # Disjoint views of one storage are not shared memory.
        safetensors_torch.save_file({"a": w[:3].contiguous(), "b": w[3:].contiguous()}, tmp_path / "ok.safetensors")
    model = torch.nn.Linear(4, 4, bias=False).to(neuron)
    shared = {"a.weight": model.weight, "b.weight": model.weight}
    safetensors_torch.save_model(torch.nn.ModuleDict({"a": model, "b": model}), tmp_path / "tied.safetensors")
    loaded = safetensors_torch.load_file(tmp_path / "tied.safetensors")
    assert len(loaded) == 1 and torch.equal(next(iter(loaded.values())), shared["a.weight"].detach().cpu())


# --- Hugging Face transformers and accelerate -------------------------------------------------

def test_save_pretrained_round_trips_a_model_with_tied_embeddings(neuron, tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).to(neuron).eval()   # no dropout
    assert model.lm_head.weight is model.transformer.wte.weight
    model.save_pretrained(tmp_path)
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).to(neuron)
    assert loaded.lm_head.weight is loaded.transformer.wte.weight
    assert _equal_state(loaded.state_dict(), model.state_dict())
    ids = torch.tensor([[1, 2, 3]], device=neuron)
    assert torch.equal(loaded(ids).logits.cpu(), model(ids).logits.cpu())


def test_accelerate_save_state_and_load_state_round_trip_model_and_optimizer(neuron, tmp_path):
    accelerate = pytest.importorskip("accelerate")
    accelerator = accelerate.Accelerator(device_placement=False)
    model = _mlp(neuron)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.randn(3, 4, device=neuron)).square().sum())
    optimizer.step()
    saved_model = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    saved_moments = [optimizer.state[p]["exp_avg"].cpu().clone() for p in model.parameters()]
    accelerator.save_state(tmp_path)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
            optimizer.state[p]["exp_avg"].zero_()
    accelerator.load_state(tmp_path)
    assert _equal_state(model.state_dict(), saved_model)
    assert all(p.device.type == "neuron" for p in model.parameters())
    moments = [optimizer.state[p]["exp_avg"] for p in model.parameters()]
    assert all(m.device.type == "neuron" for m in moments)
    assert all(torch.equal(m.cpu(), s) for m, s in zip(moments, saved_moments))
