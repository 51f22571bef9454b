"""Compiled == eager for programs that write in place: values AND devices, forward and backward.

Each program runs three ways: eagerly on the CPU (the reference values), eagerly on the
simulated device (the reference devices), and compiled with ``torch.compile(backend="neuron",
fullgraph=True)`` on that device, on ``neuron`` and on emulated ``cuda``. The programs are the
patterns that lose writes when a traced factory's buffer is not the device's own tensor:
factories followed by in-place ops, slice assignment, views written through, ``out=``,
mutated graph inputs and buffers, returned aliases; then OpInfo samples (PyTorch's own op
database) wrapped the same way: each op's in-place variant on a fresh buffer, and each op's
result written into a fresh buffer.
"""
import contextlib

import pytest
import torch
import torch.nn as nn
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

import backend.compile

DEVICES = ("neuron", "cuda")


@contextlib.contextmanager
def _on(device_type: str):
    if device_type == "cuda":
        from backend.device.cuda_emulation import emulate_cuda

        with emulate_cuda("h100"):
            yield torch.device("cuda")
    else:
        yield torch.device("neuron")


def _to(value, device):
    return tree_map(lambda t: t.detach().clone().to(device) if isinstance(t, torch.Tensor) else t, value)


def _leaves(value) -> list:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _compiled(fn):
    torch._dynamo.reset()
    backend.compile.register()
    backend.compile.reset()
    return torch.compile(fn, backend="neuron", fullgraph=True)


def _assert_same(got, want, what):
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want), f"{what}: {len(got)} tensors, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g.detach().cpu(), w.detach().cpu(), equal_nan=True,
                                   msg=lambda m, i=i: f"{what}, tensor {i}: {m}")


def _assert_devices(got, want, what):
    assert [t.device for t in _leaves(got)] == [t.device for t in _leaves(want)], what


def check_program(fn, inputs, device_type, *, grad=False):
    """``fn(*inputs)``: compiled on the device == eager on the device (values, devices, the
    inputs as the call left them) == eager on the CPU; with ``grad``, the same for the
    gradients of the floating inputs."""
    cpu_inputs = _to(inputs, "cpu")
    want = fn(*cpu_inputs)
    with _on(device_type) as device:
        eager_inputs, compiled_inputs = _to(inputs, device), _to(inputs, device)
        eager = fn(*eager_inputs)
        got = _compiled(fn)(*compiled_inputs)
        assert backend.compile.compiled_graphs(), "nothing was compiled"
        _assert_devices(got, eager, "devices of the compiled outputs")
        _assert_same(got, want, "compiled outputs")
        _assert_same(eager, want, "eager outputs")
        _assert_same(compiled_inputs, cpu_inputs, "inputs after the compiled call")
        if grad:
            _check_gradients(fn, inputs, device)


def _loss(out):
    # weights that differ per element, so a misplaced gradient cannot cancel out
    return sum((t * torch.linspace(0.5, 1.5, t.numel(), device=t.device).view_as(t)).sum()
               for t in _leaves(out) if t.is_floating_point())


def _check_gradients(fn, inputs, device):
    def grads(run, target):
        leaves = [t.requires_grad_() if t.is_floating_point() else t for t in _to(inputs, target)]
        _loss(run(*leaves)).backward()
        return [t.grad for t in leaves if t.is_floating_point()]

    want = grads(fn, "cpu")
    got = grads(_compiled(fn), device)
    _assert_devices(got, [g.to(device) for g in want], "devices of the compiled gradients")
    _assert_same(got, want, "compiled gradients")


# -- hand-written programs ---------------------------------------------------------------------
def _slice_assign(x):
    b = torch.zeros(6, device=x.device)
    b[1:5] = x
    return b


def _view_then_inplace(x):
    b = torch.zeros(8, device=x.device)
    b.view(2, 4)[1].add_(x)
    return b


def _transpose_then_copy(x):
    b = torch.zeros(4, 2, device=x.device)
    b.t()[0].copy_(x)
    return b


def _input_inplace(x):
    x.add_(1)
    return x


def _input_slice_assign(x):
    x[1:3] = 0
    return x.sum()


def _returned_aliases(x):
    b = torch.arange(8.0, device=x.device)
    b.add_(x.repeat(2))
    return b, b[2:6], b.view(2, 4)


def _view_written_before_base(x):
    a = torch.zeros(4, device=x.device)
    b = a.view(2, 2)
    b.add_(1)
    a.mul_(x)
    return b


def _host_to_device(x):
    c = torch.arange(4.0).to(x.device)    # built on the host, then moved
    c.mul_(x)
    return c


def _out_into_factory(x):
    buf = torch.empty(4, device=x.device)
    torch.add(x, 1, out=buf)
    return buf


def _buffer_independent_of_mutated_input(x):
    buf = torch.zeros(4, device=x.device)
    buf.copy_(x)
    x.mul_(2)
    return buf


def _factories_returned(x):
    return torch.zeros(3, device=x.device), torch.arange(5, device=x.device), torch.ones(2, 2, device=x.device) * x[0]


def _written_twice(x):
    b = torch.full((2, 4), -1.0, device=x.device)
    b[0] = x
    b[1].copy_(x * 2)
    b[:, 1:3].mul_(10)
    return b


IDX = torch.tensor([5, 0, 2, 3])
PROGRAMS = {
    # name: (function, inputs, check gradients)
    "full.add_": (lambda x: torch.full((4,), 2.0, device=x.device).add_(x), (), True),
    "zeros.index_copy_": (lambda x, i: torch.zeros(6, device=x.device).index_copy_(0, i, x), (IDX,), True),
    "empty.fill_.mul_": (lambda x: torch.empty(4, device=x.device).fill_(3.0).mul_(x), (), False),
    "arange.mul_": (lambda x: torch.arange(4, device=x.device, dtype=x.dtype).mul_(x), (), True),
    "ones.scatter_": (lambda x, i: torch.ones(2, 4, device=x.device).scatter_(1, i.view(2, 2) % 4, x.view(2, 2)),
                      (IDX,), False),
    "slice assignment": (_slice_assign, (), True),
    "zeros_like.add_": (lambda x: torch.zeros_like(x).add_(x, alpha=2), (), False),
    "new_zeros.index_put_": (lambda x, i: x.new_zeros(6).index_put_((i,), x), (IDX,), True),
    "new_ones.index_put_ accumulate": (lambda x, i: x.new_ones(6).index_put_((i % 2,), x, accumulate=False),
                                       (IDX,), True),
    "ones.masked_fill_": (lambda x: torch.ones(4, device=x.device).masked_fill_(x > 0, -1.0), (), False),
    "empty.copy_": (lambda x: torch.empty(2, 2, device=x.device).copy_(x.view(2, 2).t()), (), False),
    "view then in-place": (_view_then_inplace, (), True),
    "transpose then copy_": (_transpose_then_copy, (), False),
    "in-place on an input": (_input_inplace, (), False),
    "slice assignment into an input": (_input_slice_assign, (), False),
    "returned aliases": (_returned_aliases, (), True),
    "view written before its base": (_view_written_before_base, (), True),
    "tensor literal.add_": (lambda x: torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device).add_(x), (), False),
    "host to device.mul_": (_host_to_device, (), True),
    # the gradient of x.cpu() is grad.to(x.device): traced by autograd, not by Dynamo
    "input round trip through the host": (lambda x: x.cpu().to(x.device) * 2, (), True),
    "out= into a factory": (_out_into_factory, (), False),
    "buffer independent of a mutated input": (_buffer_independent_of_mutated_input, (), False),
    "factories returned": (_factories_returned, (), True),
    "eye.mul_": (lambda x: torch.eye(4, device=x.device).mul_(x), (), False),
    "ones.tril_.mul_": (lambda x: torch.ones(4, 4, device=x.device).tril_().mul_(x), (), False),
    "linspace.clamp_": (lambda x: torch.linspace(-1, 1, 4, device=x.device).clamp_(min=x.min()), (), False),
    "long zeros.index_add_": (lambda x, i: torch.zeros(6, dtype=torch.long, device=x.device).index_add_(0, i, i),
                              (IDX,), False),
    "new_full.zero_.add_": (lambda x: x.new_full((4,), 7.0).zero_().add_(x), (), False),
    "written twice": (_written_twice, (), True),
}


# Emulated cuda runs the same path (its tensors are the device's own type): a few programs
# there on every run, all of them in the slow sweep.
CUDA_PROGRAMS = ("full.add_", "zeros.index_copy_", "slice assignment", "returned aliases", "in-place on an input")
# Under CUDA emulation, Dynamo's fake ``.to("cuda")`` of a host tensor claims neuron:0 (the
# backing device), so the program fails while Dynamo traces it: a device-layer defect.
_TO_CUDA = "emulation: a traced host tensor's .to('cuda') lands on neuron:0"
CUDA_XFAIL = {"host to device.mul_": _TO_CUDA, "input round trip through the host": _TO_CUDA}


def _cases():
    for name in PROGRAMS:
        yield pytest.param(name, "neuron", id=f"{name}-neuron")
        marks = [pytest.mark.xfail(reason=CUDA_XFAIL[name], strict=True)] if name in CUDA_XFAIL else []
        if name not in CUDA_PROGRAMS:
            marks.append(pytest.mark.slow)
        yield pytest.param(name, "cuda", id=f"{name}-cuda", marks=marks)


@pytest.mark.parametrize("name, device_type", _cases())
def test_program(name, device_type):
    fn, extra, grad = PROGRAMS[name]
    torch.manual_seed(0)
    check_program(fn, (torch.randn(4), *extra), device_type, grad=grad)


class _Cache(nn.Module):
    """A static KV cache's write: a buffer updated in place at given positions."""

    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(2, 8, 4))

    def forward(self, positions, values):
        self.keys.index_copy_(1, positions, values)
        return self.keys[:, : positions.numel() + 2] * 1


@pytest.mark.parametrize("device_type", DEVICES)
def test_module_buffer_written_in_place(device_type):
    torch.manual_seed(0)
    cpu = _Cache()
    positions, values = torch.tensor([1, 4]), torch.randn(2, 2, 4)
    want = cpu(positions, values)
    with _on(device_type) as device:
        model = _Cache().to(device)
        got = _compiled(model)(positions.to(device), values.to(device))
        assert got.device.type == device.type and model.keys.device.type == device.type
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(model.keys.cpu(), cpu.keys)


def test_program_without_device_inputs():
    # no device tensor comes in to copy the device's tensor type from: the device makes one
    fn = lambda: (torch.zeros(3, device="neuron").add_(1), torch.arange(4, device="neuron"))  # noqa: E731
    got = _compiled(fn)()
    assert [t.device.type for t in got] == ["neuron", "neuron"]
    _assert_same(got, fn(), "compiled outputs")


def test_timing_only_factory_writes_stay_data_free():
    fn, _, _ = PROGRAMS["slice assignment"]
    with torch.neuron.timing_only(values_up_to=0):       # no tensor keeps values for being small
        x = torch.randn(4, device="neuron")
        got, eager = _compiled(fn)(x), fn(x)
    assert got.device == eager.device and got.shape == eager.shape
    assert got._inner.is_meta     # the write traced on the device's data-free host side


# -- OpInfo samples ----------------------------------------------------------------------------
# A subset that covers the in-place families (arithmetic, index, scatter, masked, fill) and
# the factories; the slow sweep takes every op with an in-place variant or a device argument.
FAST_OPS = ("add", "addcmul", "clamp", "index_copy", "index_put", "masked_fill", "scatter_add", "fill", "tril",
            "zeros", "full", "arange", "new_full", "full_like")


def _op_db():
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


FACTORIES = ("zeros", "ones", "full", "arange", "linspace", "logspace", "eye", "scalar_tensor")
# ops whose values are random or uninitialised: nothing to compare
_UNCOMPARABLE = ("rand", "rrelu", "empty", "bernoulli", "normal", "uniform", "exponential", "cauchy", "geometric",
                 "multinomial", "dropout")
# what Dynamo cannot trace in one graph (it says so: Unsupported), whatever the backend
_UNTRACEABLE = ("resize_", "resize_as_")


def _ops(names=None):
    ops = [op for op in _op_db() if not op.variant_test_name
           and not any(word in op.name for word in _UNCOMPARABLE) and op.name not in _UNTRACEABLE]
    if names is not None:
        return [op for op in ops if op.name in names]
    return [op for op in ops if op.inplace_variant is not None or op.name in FACTORIES]


def _into_fresh_buffer(y):
    """``y`` written into a fresh device buffer one row larger (a static cache's write)."""
    if not isinstance(y, torch.Tensor):
        return tree_map(_into_fresh_buffer, y)
    buf = torch.zeros((2, *y.shape), dtype=y.dtype, device=y.device)
    buf[1] = y
    return buf


def _programs(op, sample):
    """(label, fn, tensors) for a sample: the op's result into a fresh buffer, and its
    in-place variant on a fresh copy of the input. Non-tensor arguments are baked in;
    ``device=`` follows the device of the trailing anchor tensor."""
    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]

    def rebuild(tensors, anchor):
        values = list(leaves)
        for i, t in zip(positions, tensors):
            values[i] = t
        first, args, kwargs = tree_unflatten(values, spec)
        if "device" in kwargs:
            kwargs = {**kwargs, "device": anchor.device}
        return first, args, kwargs

    def result_into_buffer(*tensors):
        first, args, kwargs = rebuild(tensors[:-1], tensors[-1])
        return _into_fresh_buffer(op.op(first, *args, **kwargs))

    tensors = [leaves[i] for i in positions]
    programs = [("result into a fresh buffer", result_into_buffer)]
    if op.inplace_variant is not None and isinstance(sample.input, torch.Tensor):
        def inplace_on_fresh_copy(*tensors):
            first, args, kwargs = rebuild(tensors[:-1], tensors[-1])
            buf = torch.empty(first.shape, dtype=first.dtype, device=first.device)
            buf.copy_(first)
            op.inplace_variant(buf, *args, **kwargs)
            return buf

        programs.append(("in-place variant on a fresh copy", inplace_on_fresh_copy))
    return [(label, fn, (*tensors, torch.zeros(1))) for label, fn in programs]


def _runs_on_cpu(fn, inputs) -> bool:
    try:
        fn(*_to(inputs, "cpu"))
    except Exception:       # a sample the op rejects (e.g. an in-place broadcast): no reference
        return False
    return True


def _traces_on_cpu(fn, inputs) -> bool:
    """Whether PyTorch's own ``aot_eager`` backend compiles ``fn`` on CPU tensors (some meta
    kernels refuse what the CPU kernel accepts, e.g. ``addbmm_`` broadcasting its ``self``)."""
    torch._dynamo.reset()
    try:
        torch.compile(fn, backend="aot_eager", fullgraph=True)(*_to(inputs, "cpu"))
    except torch._dynamo.exc.TorchDynamoException:
        return False
    return True


def _dtype(op) -> torch.dtype:
    supported = op.supported_dtypes("cpu")
    return next(d for d in (torch.float32, torch.int64, torch.bool, *supported) if d in supported)


def check_op(op, device_type, samples: int):
    torch.manual_seed(0)
    checked = 0
    for sample in list(op.sample_inputs("cpu", _dtype(op)))[:samples]:
        for label, fn, inputs in _programs(op, sample):
            if not _runs_on_cpu(fn, inputs):
                continue
            try:
                check_program(fn, inputs, device_type)
            except torch._dynamo.exc.TorchDynamoException:
                if not _traces_on_cpu(fn, inputs):
                    continue       # PyTorch's own limitation, not the backend's
                raise
            except AssertionError as exc:
                raise AssertionError(f"{op.name}, {label}, sample {sample}: {exc}") from exc
            checked += 1
    assert checked, f"{op.name}: no sample ran"


@pytest.mark.parametrize("op", _ops(FAST_OPS), ids=lambda op: op.name)
def test_opinfo_sample(op):
    check_op(op, "neuron", samples=1)


@pytest.mark.slow
@pytest.mark.parametrize("op", _ops(), ids=lambda op: op.name)
def test_opinfo_sweep(op):
    check_op(op, "neuron", samples=2)
