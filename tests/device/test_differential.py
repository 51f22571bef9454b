"""Differential tests: every op on neuron equals the same op on CPU (within dtype tolerance)."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
       torch.float16: dict(rtol=1e-3, atol=1e-3)}


def _to(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(o, device) for o in obj)
    return obj


def _cpu(obj):
    return _to(obj, "cpu")


def check(fn, *inputs, dtype=torch.float32, grad=False):
    """Run fn on CPU and on neuron with identical inputs; compare outputs (and input grads)."""
    cpu_in = [i.detach().clone().requires_grad_(grad and i.is_floating_point()) if isinstance(i, torch.Tensor) else i for i in inputs]
    dev_in = [i.detach().to("neuron").requires_grad_(grad and i.is_floating_point()) if isinstance(i, torch.Tensor) else i for i in inputs]
    ref, out = fn(*cpu_in), fn(*dev_in)
    tol = TOL.get(dtype, {})
    torch.testing.assert_close(_cpu(out), ref, **tol, equal_nan=True)
    if grad:
        torch.autograd.backward([r for r in (ref if isinstance(ref, tuple) else (ref,)) if r.requires_grad],
                                [torch.ones_like(r) for r in (ref if isinstance(ref, tuple) else (ref,)) if r.requires_grad])
        outs = out if isinstance(out, tuple) else (out,)
        torch.autograd.backward([o for o in outs if o.requires_grad],
                                [torch.ones_like(o) for o in outs if o.requires_grad])
        for c, d in zip(cpu_in, dev_in):
            if isinstance(c, torch.Tensor) and c.requires_grad:
                if c.grad is None:
                    assert d.grad is None
                else:
                    torch.testing.assert_close(d.grad.cpu(), c.grad, **tol)


torch.manual_seed(0)
X = torch.randn(4, 8)
Y = torch.randn(4, 8)
M = torch.randn(8, 5)
IMG = torch.randn(2, 3, 8, 8)
W = torch.randn(4, 3, 3, 3)

UNARY = ["abs", "neg", "exp", "log1p", "sin", "cos", "tanh", "sigmoid", "relu", "sqrt", "rsqrt",
         "square", "floor", "ceil", "round", "sign", "erf", "reciprocal"]


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_unary(neuron, name, dtype):
    x = (X.abs() + 0.1).to(dtype) if name in ("sqrt", "rsqrt", "reciprocal") else X.to(dtype)
    check(getattr(torch, name), x, dtype=dtype, grad=dtype == torch.float32 and name not in ("floor", "ceil", "round", "sign"))


BINARY = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum, torch.atan2,
          torch.pow, lambda a, b: a > b, lambda a, b: torch.where(a > 0, a, b)]


@pytest.mark.parametrize("fn", BINARY)
def test_binary(neuron, fn):
    check(fn, X, Y.abs() + 0.5, grad=fn in (torch.add, torch.mul, torch.div))


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_integer_and_bool_ops(neuron, dtype):
    a = torch.randint(0, 5, (6,)).to(dtype)
    b = torch.randint(0, 5, (6,)).to(dtype)
    for fn in (torch.logical_and, torch.logical_or, torch.eq, lambda x, y: x.sum(), torch.maximum):
        check(fn, a, b, dtype=dtype)
    if dtype == torch.int64:
        check(lambda x, y: x * y + 3, a, b, dtype=dtype)
        check(lambda x, y: torch.div(x, y + 1, rounding_mode="floor"), a, b, dtype=dtype)


REDUCTIONS = [lambda x: x.sum(), lambda x: x.sum(1), lambda x: x.mean(0, keepdim=True),
              lambda x: x.amax(1), lambda x: x.max(1).values, lambda x: x.argmax(1),
              lambda x: x.var(1), lambda x: x.std(), lambda x: x.norm(), lambda x: x.prod(1),
              lambda x: x.cumsum(1), lambda x: x.logsumexp(1), lambda x: torch.sort(x, 1)[0],
              lambda x: torch.topk(x, 3, 1).values]


@pytest.mark.parametrize("fn", REDUCTIONS)
def test_reductions(neuron, fn):
    check(fn, X, grad=True)


MATMULS = [(torch.mm, (X, M)), (torch.matmul, (X, M)), (torch.bmm, (torch.randn(2, 3, 4), torch.randn(2, 4, 5))),
           (lambda b, a, c: torch.addmm(b, a, c), (torch.randn(5), X, M)),
           (lambda a, w, b: F.linear(a, w, b), (X, torch.randn(3, 8), torch.randn(3))),
           (torch.einsum, ("ij,jk->ik", X, M))]


@pytest.mark.parametrize("fn,args", MATMULS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmuls(neuron, fn, args, dtype):
    args = tuple(a.to(dtype) if isinstance(a, torch.Tensor) else a for a in args)
    check(fn, *args, dtype=dtype, grad=dtype == torch.float32)


NN = [
    (lambda x, w: F.conv2d(x, w, padding=1), (IMG, W)),
    (lambda x, w: F.conv2d(x, w, stride=2), (IMG, W)),
    (lambda x, w: F.conv1d(x, w), (torch.randn(2, 3, 10), torch.randn(2, 3, 3))),
    (lambda x: F.max_pool2d(x, 2), (IMG,)),
    (lambda x: F.avg_pool2d(x, 2), (IMG,)),
    (lambda x: F.adaptive_avg_pool2d(x, 1), (IMG,)),
    (lambda x: F.layer_norm(x, (8,)), (X,)),
    (lambda x: F.group_norm(x, 1), (IMG,)),
    (lambda x: F.batch_norm(x, None, None, training=True), (IMG,)),
    (lambda x: F.softmax(x, -1), (X,)),
    (lambda x: F.log_softmax(x, -1), (X,)),
    (lambda x: F.gelu(x), (X,)),
    (lambda x: F.silu(x), (X,)),
    (lambda x: F.dropout(x, 0.0), (X,)),
    (lambda x, t: F.cross_entropy(x, t), (X, torch.tensor([1, 0, 7, 3]))),
    (lambda x, t: F.mse_loss(x, t), (X, Y)),
    (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     (torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4))),
    (lambda x: F.pad(x, (1, 2)), (X,)),
    (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (IMG,)),
]


@pytest.mark.parametrize("fn,args", NN)
def test_nn_ops(neuron, fn, args):
    check(fn, *args, grad=True)


INDEXING = [
    (lambda x: x[1:3, ::2], (X,)),
    (lambda x: x[torch.tensor([0, 2])], (X,)),
    (lambda x, i: torch.gather(x, 1, i), (X, torch.randint(0, 8, (4, 3)))),
    (lambda x, i: torch.zeros(4, 8).to(x.device).scatter_add(1, i, x[:, :3]), (X, torch.randint(0, 8, (4, 3)))),
    (lambda x, i: torch.index_select(x, 0, i), (X, torch.tensor([3, 0]))),
    (lambda x: x.masked_fill(x > 0, 0.0), (X,)),
    (lambda x: torch.cat([x, x * 2], 1), (X,)),
    (lambda x: torch.stack([x, x], 0), (X,)),
    (lambda x: x.t().contiguous().view(-1), (X,)),
    (lambda x: x.permute(1, 0).reshape(2, -1), (X,)),
    (lambda x: torch.tril(x), (X,)),
    (lambda x: x.chunk(2, 1)[1], (X,)),
    (lambda x: x.unsqueeze(0).expand(3, 4, 8).sum(0), (X,)),
    (lambda w, i: F.embedding(i, w), (torch.randn(10, 4), torch.tensor([[1, 2], [9, 0]]))),
]


@pytest.mark.parametrize("fn,args", INDEXING)
def test_indexing_and_views(neuron, fn, args):
    check(fn, *args, grad=True)


def test_inplace_sequence(neuron):
    def fn(x):
        y = x.clone()
        y.mul_(2).add_(1)
        y[0].zero_()
        y.clamp_(min=-1)
        return y
    check(fn, X)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.lists(st.integers(1, 4), min_size=1, max_size=3),
       st.booleans())
def test_broadcasting_property(shape_a, shape_b, use_bf16):
    torch.neuron.set_target("trn2")
    shape_b = [1 if (i % 2) else s for i, s in enumerate(shape_b)]
    a, b = torch.randn(shape_a), torch.randn(shape_b)
    dtype = torch.bfloat16 if use_bf16 else torch.float32
    try:
        ref = a.to(dtype) * b.to(dtype) + a.to(dtype)
    except RuntimeError as err:
        with pytest.raises(RuntimeError, match=str(err).split("(")[0][:40]):
            a.to("neuron", dtype) * b.to("neuron", dtype)
        return
    out = a.to("neuron", dtype) * b.to("neuron", dtype) + a.to("neuron", dtype)
    torch.testing.assert_close(out.cpu(), ref, **TOL[dtype])
