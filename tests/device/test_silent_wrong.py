"""Regressions for device results that silently differed from CPU, and for process crashes."""
import io
import subprocess
import sys
import warnings

import pytest
import torch


def test_conj_bit_is_honoured(neuron):
    z = torch.tensor([1 + 2j], device=neuron)
    assert z.conj().is_conj()
    assert torch.equal((z.conj() * z).cpu(), torch.tensor([5 + 0j]))


def test_complex_gradient_uses_conjugate(neuron):
    a = torch.tensor(1 + 2j, device=neuron, requires_grad=True)
    b = torch.tensor(3 + 4j, device=neuron)
    (a * b).real.backward()
    assert a.grad.cpu() == torch.tensor(3 - 4j)


def test_neg_bit_is_honoured(neuron):
    n = torch._neg_view(torch.tensor([1.0, 2.0], device=neuron))
    assert torch.equal((n + 0).cpu(), torch.tensor([-1.0, -2.0]))


def test_efficient_zero_tensor_is_zeros(neuron):
    z = torch._efficientzerotensor((3,), device=neuron)
    assert torch.equal((z + 1).cpu(), torch.ones(3))


def test_out_resizes_like_cpu(neuron):
    out = torch.empty(2, device=neuron)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.add(torch.ones(2, 3, device=neuron), 1, out=out)
    assert out.shape == (2, 3) and (out + 1).shape == (2, 3)
    assert torch.equal(out.cpu(), torch.full((2, 3), 2.0))


def test_composites_that_resize_out(neuron):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    out = torch.empty(0, device=neuron)
    torch.matmul(a.to(neuron), b.to(neuron), out=out)
    torch.testing.assert_close(out.cpu(), a @ b)
    x, q = torch.randn(10), torch.tensor([0.2, 0.5])
    torch.testing.assert_close(torch.quantile(x.to(neuron), q.to(neuron)).cpu(), torch.quantile(x, q))
    s = torch.randn(400)
    torch.testing.assert_close(torch.stft(s.to(neuron), 64, return_complex=True).cpu(),
                               torch.stft(s, 64, return_complex=True), atol=1e-5, rtol=1e-5)


def test_resize_and_set(neuron):
    r = torch.empty(0, device=neuron).resize_(3, 4)
    assert r.shape == (3, 4) and r.stride() == (4, 1)
    src = torch.arange(6.0, device=neuron)
    w = torch.empty(0, device=neuron).set_(src)
    assert w.shape == (6,) and torch.equal(w.cpu(), torch.arange(6.0))
    with pytest.raises(RuntimeError, match="untyped_storage"):
        torch.empty(0, device=neuron).set_(src.untyped_storage(), 0, (2,), (1,))


def _roundtrip(obj, **kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **kwargs)


@pytest.mark.parametrize("map_location,expected", [(None, "neuron"), ("cpu", "cpu"), ("neuron", "neuron")])
def test_load_honours_map_location(neuron, map_location, expected):
    x = torch.randn(3, device=neuron)
    y = _roundtrip({"w": x}, map_location=map_location)["w"]
    assert y.device.type == expected and torch.equal(y.cpu(), x.cpu())


def _run_isolated(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import torch, workbench\n" + code],
                          capture_output=True, text=True, timeout=120)


def test_load_cpu_file_onto_device_does_not_crash():
    done = _run_isolated(
        "import io\nbuf = io.BytesIO(); torch.save({'w': torch.ones(3)}, buf); buf.seek(0)\n"
        "print(torch.load(buf, map_location='neuron')['w'].sum().item())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3.0"


_CHECKPOINT = (
    "from torch.utils.checkpoint import checkpoint\n"
    "lin = torch.nn.Linear(4, 4).to('neuron'); x = torch.randn(2, 4, device='neuron', requires_grad=True)\n"
    "checkpoint(lambda t: lin(t).relu(), x, use_reentrant=False).sum().backward()\n"
    "print(x.grad.shape, flush=True)")


def test_non_reentrant_checkpoint_backward_completes():
    done = _run_isolated(_CHECKPOINT)
    assert "torch.Size([2, 4])" in done.stdout, done.stderr


@pytest.mark.xfail(strict=False, reason="under CPU contention the process sometimes aborts at exit "
                   "('terminate called without an active exception') after backward completed")
def test_non_reentrant_checkpoint_process_exits_cleanly():
    assert _run_isolated(_CHECKPOINT).returncode == 0


def test_tolist_and_numpy_like_cuda(neuron):
    x = torch.tensor([1.0, 2.0], device=neuron)
    assert x.tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="can't convert neuron:0 device type tensor to numpy"):
        x.numpy()
    assert x.numpy(force=True).tolist() == [1.0, 2.0]
