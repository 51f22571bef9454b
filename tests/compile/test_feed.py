"""Kernels reach each sink by what the sink is: feed_kernel, the NeuronCore adapter, or an error."""
import re

import pytest
import torch

from backend.compile.feed import feed_kernel
from backend import recording
from backend.lowering import EagerSession


class KernelSink:
    """A sink with its own feed_kernel (the GPU session's shape)."""

    def __init__(self):
        self.kernels, self.ops = [], []

    def feed(self, record):
        self.ops.append(record)

    def feed_kernel(self, name, records, internal_bytes_saved=0, nodes=(), source=None):
        self.kernels.append((name, [r.name for r in records], internal_bytes_saved, tuple(nodes)))


def _compiled_gelu_linear(neuron):
    w, b = torch.randn(16, 32, device=neuron), torch.randn(32, device=neuron)
    f = torch.compile(lambda x: torch.nn.functional.gelu(x @ w + b), backend="neuron")
    x = torch.randn(8, 16, device=neuron)
    f(x)
    return f, x


def test_sink_with_feed_kernel_gets_whole_kernels(neuron):
    f, x = _compiled_gelu_linear(neuron)
    sink = KernelSink()
    with recording.recording(sink):
        f(x)
    ((name, ops, saved, nodes),) = sink.kernels
    assert ops == ["aten::mm", "aten::add", "aten::gelu"] and set(nodes) >= {"mm", "gelu"}
    # mm's and add's outputs never leave the kernel: one write and one read each
    assert saved == 2 * 2 * 8 * 32 * 4
    assert sink.ops == []


def test_neuron_session_gets_one_fused_program(neuron):
    f, x = _compiled_gelu_linear(neuron)
    session = EagerSession("trn2")
    with recording.recording(session):
        f(x)
    (op,) = session.trace.ops
    assert op.kind == "kernel" and "mm" in op.nodes and re.search(r"test_feed\.py:\d+$", op.source)
    # inputs read once, the result written once: no intermediate reaches HBM
    assert op.hbm_read_bytes + op.hbm_write_bytes == 4 * (8 * 16 + 16 * 32 + 32 + 8 * 32)


def test_sink_that_cannot_take_kernels_is_an_error(neuron):
    class FeedOnly:
        def feed(self, record):
            pass

    from backend.compile import compiled_graphs

    f, x = _compiled_gelu_linear(neuron)
    kernel = compiled_graphs()[0].forward.kernels[0]
    with pytest.raises(TypeError, match="no feed_kernel"):
        feed_kernel(FeedOnly(), kernel)


def test_emulated_cuda_device_feeds_the_gpu_session():
    from backend.device import cuda_emulation as emulation
    from benchmarks.compile_bench import Block

    torch.manual_seed(0)
    ref, x = Block(d=32, heads=4, seq=16), torch.randn(2, 16, 32)
    with emulation.emulate_cuda("h100") as device:
        model = Block(d=32, heads=4, seq=16).cuda()
        model.load_state_dict(ref.state_dict())
        xc = x.cuda()
        compiled = torch.compile(model, backend="neuron")
        start = len(device.session.trace.ops)
        out = compiled(xc)
        out.sum().backward()
        ops = device.session.trace.ops[start:]
        assert out.device.type == "cuda"
        torch.testing.assert_close(out.cpu(), ref(x))
    assert device.session.trace.device_kind == "cuda"
    assert any(op.kind == "kernel" and "attention" in op.name for op in ops)


def test_prefetchable_bytes_are_the_inputs_the_previous_kernel_does_not_make():
    from backend.compile.feed import prefetchable_bytes
    from backend.compile.kernels import Handoff, HandoffValue, KernelSpec
    from backend.sim.descriptors import OpRecord, TensorDesc

    x, w, y = TensorDesc((8, 16), "float32"), TensorDesc((16, 32), "float32"), TensorDesc((8, 32), "float32")
    producer = KernelSpec("k0", "kernel", (), [OpRecord(0, "aten::relu", (x,), (x,))], 0, inputs_from=((None,),))
    # consumer: mm(x from the producer, w a parameter), then add(mm's output, y an older value)
    records = [OpRecord(0, "aten::mm", (x, w), (y,)), OpRecord(1, "aten::add", (y, y), (y,))]
    consumer = KernelSpec("k1", "kernel", (), records, 0, inputs_from=((None, None), ((0, 0), None)))
    consumer.handoff_in = Handoff(producer, consumer, (HandoffValue((0, 0), ((0, 0),), x.nbytes, True),))
    assert prefetchable_bytes(consumer) == w.nbytes + y.nbytes
    consumer.handoff_in = None
    assert prefetchable_bytes(consumer) == x.nbytes + w.nbytes + y.nbytes


def test_compiled_kernels_load_inputs_during_the_previous_kernel(neuron):
    """In a compiled two-linear graph, the second kernel's weight loads start before it does."""
    w1, w2 = torch.randn(256, 512, device=neuron), torch.randn(512, 256, device=neuron)
    f = torch.compile(lambda x: torch.softmax(torch.relu(x @ w1) @ w2, dim=-1), backend="neuron")
    x = torch.randn(512, 256, device=neuron)
    f(x)
    session = EagerSession("trn2")
    with recording.recording(session):
        f(x)
    kernels = [op for op in session.trace.ops if op.kind == "kernel"]
    assert len(kernels) >= 2 and any(op.prefetch_bytes for op in kernels[1:])
    early = [e for e in session.trace.events if e.engine.startswith("dma")
             and e.start_ns < session.trace.ops[e.op_index].start_ns]
    assert early
