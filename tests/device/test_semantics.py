"""Eager semantics of the neuron device: factories, moves, autograd, views, serialization."""
import io

import pytest
import torch

from backend.device.tensor import DeviceTensor

FACTORIES = [
    lambda d: torch.empty(2, 3, device=d).zero_(),
    lambda d: torch.zeros(2, 3, device=d),
    lambda d: torch.ones(2, 3, device=d, dtype=torch.bfloat16),
    lambda d: torch.full((2, 3), 7.5, device=d),
    lambda d: torch.arange(0, 10, 3, device=d),
    lambda d: torch.eye(4, device=d),
    lambda d: torch.linspace(-1, 1, 9, device=d),
    lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
    lambda d: torch.zeros_like(torch.ones(3, device=d)),
    lambda d: torch.ones(3, device=d).new_full((2,), 3.0),
    lambda d: torch.ones(3, device=d).new_zeros((2, 2)),
]


@pytest.mark.parametrize("make", FACTORIES)
def test_factories_match_cpu(neuron, make):
    on_device = make("neuron")
    assert on_device.device == torch.device("neuron:0")
    assert isinstance(on_device, DeviceTensor)
    torch.testing.assert_close(on_device.cpu(), make("cpu"))


def test_random_factories_reproduce_cpu_under_seed(neuron):
    for make in (torch.rand, torch.randn):
        torch.manual_seed(0)
        a = make(5, 5, device="neuron")
        torch.manual_seed(0)
        b = make(5, 5)
        torch.testing.assert_close(a.cpu(), b)
    torch.neuron.manual_seed(3)
    x = torch.randint(0, 10, (8,), device="neuron")
    torch.neuron.manual_seed(3)
    assert torch.equal(x.cpu(), torch.randint(0, 10, (8,), device="neuron").cpu())


def test_device_strings_and_moves(neuron):
    assert torch.device("neuron").type == "neuron"
    x = torch.randn(4, 4)
    y = x.to("neuron:0")
    assert y.device.type == "neuron" and y.device.index == 0
    assert type(y.cpu()) is torch.Tensor and torch.equal(y.cpu(), x)
    assert torch.equal(x.neuron().cpu(), x)
    assert y.to("neuron") is y  # already there: no copy, like .to("cuda") on a cuda tensor
    assert y.to(torch.float16).dtype == torch.float16


def test_module_to_and_training_step(neuron):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    dev = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    dev.load_state_dict(ref.state_dict())
    dev.to("neuron")
    assert all(p.device.type == "neuron" and isinstance(p, torch.nn.Parameter) for p in dev.parameters())
    x = torch.randn(5, 8)
    for model, inp in ((ref, x), (dev, x.to("neuron"))):
        model(inp).pow(2).mean().backward()
    for p_ref, p_dev in zip(ref.parameters(), dev.parameters()):
        assert p_dev.grad.device.type == "neuron"
        torch.testing.assert_close(p_dev.grad.cpu(), p_ref.grad)


@pytest.mark.parametrize("opt_cls", [torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW])
@pytest.mark.parametrize("foreach", [False, True])
def test_optimizers_match_cpu(neuron, opt_cls, foreach):
    torch.manual_seed(1)
    ref = torch.nn.Linear(6, 3)
    dev = torch.nn.Linear(6, 3)
    dev.load_state_dict(ref.state_dict())
    dev.to("neuron")
    kwargs = {"lr": 0.1, "foreach": foreach}
    if opt_cls is torch.optim.SGD:
        kwargs["momentum"] = 0.9
    opts = [opt_cls(ref.parameters(), **kwargs), opt_cls(dev.parameters(), **kwargs)]
    x = torch.randn(4, 6)
    for _ in range(3):
        for model, opt, inp in ((ref, opts[0], x), (dev, opts[1], x.to("neuron"))):
            opt.zero_grad()
            model(inp).square().sum().backward()
            opt.step()
    for p_ref, p_dev in zip(ref.parameters(), dev.parameters()):
        torch.testing.assert_close(p_dev.detach().cpu(), p_ref.detach(), rtol=1e-5, atol=1e-6)


def test_views_alias_base_and_each_other(neuron):
    base = torch.zeros(4, 4, device="neuron")
    row = base[1]
    col = base[:, 2]
    row.add_(1.0)
    col.mul_(3.0)
    flat = base.view(-1)
    flat[0] = 5.0
    expected = torch.zeros(4, 4)
    expected[1] += 1
    expected[:, 2] *= 3
    expected.view(-1)[0] = 5
    torch.testing.assert_close(base.cpu(), expected)
    assert row.cpu()[2].item() == 3.0  # write through col seen by row
    t = base.t()
    t[0, 3] = -1
    assert base.cpu()[3, 0].item() == -1


def test_inplace_returns_same_object_and_out_variants(neuron):
    x = torch.ones(3, device="neuron")
    assert x.add_(1) is x
    a, b = torch.randn(3, 3, device="neuron"), torch.randn(3, 3, device="neuron")
    out = torch.empty(3, 3, device="neuron")
    assert torch.matmul(a, b, out=out) is out
    torch.testing.assert_close(out.cpu(), a.cpu() @ b.cpu())
    # Like CPU: an empty out= tensor is resized to the result's shape.
    empty = torch.empty(0, device="neuron")
    assert torch.add(a, b, out=empty) is empty and empty.shape == (3, 3)
    torch.testing.assert_close(empty.cpu(), a.cpu() + b.cpu())


def test_data_dependent_shapes(neuron):
    host = torch.tensor([0.0, 2.0, -1.0, 2.0, 3.0])
    dev = host.to("neuron")
    assert torch.equal(torch.nonzero(dev).cpu(), torch.nonzero(host))
    assert torch.equal(torch.masked_select(dev, dev > 0).cpu(), torch.masked_select(host, host > 0))
    assert torch.equal(torch.unique(dev).cpu(), torch.unique(host))
    assert dev.sum().item() == host.sum().item()


def test_printing(neuron):
    x = torch.arange(3, device="neuron", dtype=torch.float32)
    assert repr(x) == "tensor([0., 1., 2.], device='neuron:0')"
    assert "requires_grad=True" in repr(x.clone().requires_grad_())
    assert "dtype=torch.bfloat16" in repr(x.bfloat16())
    assert "grad_fn=<MulBackward0>" in str(x.clone().requires_grad_() * 2)


def test_state_dict_round_trip(neuron):
    model = torch.nn.Linear(3, 2).to("neuron")
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert all(v.device.type == "neuron" for v in loaded.values())
    fresh = torch.nn.Linear(3, 2).to("neuron")
    fresh.load_state_dict(loaded)
    torch.testing.assert_close(fresh.weight.cpu(), model.weight.cpu())


def test_set_default_device(neuron):
    torch.set_default_device("neuron")
    try:
        assert torch.zeros(2).device.type == "neuron"
        assert torch.nn.Linear(2, 2).weight.device.type == "neuron"
    finally:
        torch.set_default_device(None)
    assert torch.zeros(2).device.type == "cpu"


def test_torch_neuron_module(neuron):
    nm = torch.neuron
    assert nm.is_available() and nm.device_count() == 8 and nm.current_device() == 0
    nm.set_device(0)
    with nm.device(0):
        nm.synchronize()
    props = nm.get_device_properties(0)
    assert props.target == "trn2" and props.total_memory > 0 and props.cores_per_chip >= 1
    assert "trn2" in nm.get_device_name() and "simulated" in nm.get_device_name()
    before = nm.memory_allocated()
    x = torch.empty(1024, 1024, device="neuron")
    assert nm.memory_allocated() - before == 4 * 1024 * 1024
    assert nm.max_memory_allocated() >= nm.memory_allocated()
    assert nm.memory_reserved() >= nm.memory_allocated()
    del x
    assert nm.memory_allocated() == before
    nm.reset_peak_memory_stats()
    assert nm.max_memory_allocated() == before
    assert nm.memory_stats()["allocated_bytes.all.current"] == before
    assert "memory summary" in nm.memory_summary()
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        nm.set_device(8)   # trn2 shows neuron:0..7


def test_accelerator_reports_neuron(neuron):
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.is_available()


def test_registration_is_idempotent(neuron):
    from backend.device import register

    register()
    register()
    assert torch._C._get_privateuse1_backend_name() == "neuron"


def test_a_sparse_coo_tensor_lives_on_the_device_and_matches_cpu(neuron):
    # The memory books used to ask a sparse host tensor for its storage, which it has not.
    dense = torch.tensor([[0.0, 2.0], [3.0, 0.0]])
    sparse = dense.to(neuron).to_sparse()
    assert sparse.layout == torch.sparse_coo and sparse.device.type == "neuron"
    assert torch.equal(sparse.cpu().to_dense(), dense)
    assert torch.equal((sparse + sparse).to_dense().cpu(), 2 * dense)


def test_a_compressed_sparse_tensor_is_refused_with_a_clear_error(neuron):
    # A wrapper tensor with a CSR layout could be built but not even asked for its layout.
    with pytest.raises(RuntimeError, match="torch.sparse_csr tensors are not supported on the neuron"):
        torch.eye(2, device=neuron).to_sparse_csr()


def test_a_sparse_tensor_op_runs_after_a_fake_world_marked_values(neuron):
    """Once any storage was marked as holding no values, every op checks its inputs' storages:
    a sparse COO input has none to check, and the op still runs."""
    from backend.device import fake_values
    marked = torch.ones(4, device="neuron")
    fake_values.mark([marked._inner], "all_reduce", 8)
    sparse = torch.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    on_device = sparse.to("neuron")
    torch.testing.assert_close((on_device + on_device).cpu().to_dense(), (sparse + sparse).to_dense())
