"""A compiled graph is one NEFF: one launch per call on the NeuronCore, one per kernel on a GPU."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from backend import recording
from backend.compile.costing import cost_kernels
from backend.compile.feed import feed_graph
from backend.compile.fusion import fuse, mark_parameters
from backend.compile.kernels import build_kernels
from backend.lowering import EagerSession
from backend.sim.gpu.timeline import GpuSession
from backend.sim.presets import get_target


def _three_kernels(x, w):
    return torch.softmax(torch.mm(x, w), -1).sum(0)


@pytest.fixture
def kernels():
    gm = make_fx(_three_kernels, tracing_mode="fake")(torch.randn(256, 128), torch.randn(128, 512))
    mark_parameters(gm.graph, static_inputs=())
    built = build_kernels(gm, fuse(gm.graph))
    assert len(built) >= 2
    return built


def test_each_call_of_a_graph_pays_one_launch_on_the_neuroncore(kernels):
    session = EagerSession("trn2")
    for _ in range(3):
        feed_graph(session, kernels)
    launches = [op.launch_overhead_ns for op in session.trace.ops]
    per_call = get_target("trn2").launch_overhead_ns
    assert launches == [per_call, *[0.0] * (len(kernels) - 1)] * 3
    assert session.trace.summary()["launch_overhead_ns"] == 3 * per_call


def test_the_graph_log_charges_the_launch_to_the_first_kernel(kernels):
    costs, _ = cost_kernels(kernels, get_target("trn2"))
    assert [costs[k.name].launches for k in kernels] == [1] + [0] * (len(kernels) - 1)


def test_a_gpu_launches_every_kernel(kernels):
    session = GpuSession("h100")
    feed_graph(session, kernels)
    assert len(session.trace.ops) == len(kernels)
    assert session.trace.total_time_ns >= len(kernels) * session.launch_ns


def test_torch_compile_launches_once_per_call(neuron):
    fn = torch.compile(_three_kernels, backend="neuron")
    x, w = torch.randn(256, 128, device=neuron), torch.randn(128, 512, device=neuron)
    fn(x, w)        # compile outside the recording
    session = EagerSession("trn2")
    with recording.recording(session):
        fn(x, w)
        fn(x, w)
    kernels = [op for op in session.trace.ops if op.kind == "kernel"]
    assert len(kernels) >= 4
    assert session.trace.summary()["launch_overhead_ns"] == 2 * get_target("trn2").launch_overhead_ns
