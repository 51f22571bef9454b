"""What compiled mode models across kernels: SBUF handoffs, parameters laid out once, hoisting."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from backend.compile.feed import feed_kernel, first_call_done, kept_in_sbuf
from backend.compile.fusion import fuse, is_parameter, mark_parameters
from backend.compile.kernels import build_kernels
from backend.lowering import EagerSession, lower
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.presets import get_target
from backend.sim.scheduler import Simulator


def _kernels(fn, *args, parameters=()):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    mark_parameters(gm.graph, static_inputs=parameters)
    return build_kernels(gm, fuse(gm.graph))


def _hbm(session) -> int:
    s = session.trace.summary()
    return s["hbm_read_bytes"] + s["hbm_write_bytes"]


def _feed(kernels, calls: int = 1) -> EagerSession:
    session = EagerSession("trn2")
    for _ in range(calls):
        for kernel in kernels:
            feed_kernel(session, kernel)
        first_call_done(kernels)
    return session


def _chain(x, w):
    return torch.mm(x, w).sum(-1)


def test_intermediate_that_fits_skips_exactly_its_write_and_read():
    args = (torch.randn(256, 128), torch.randn(128, 512))
    chained = _kernels(_chain, *args)
    assert [k.kind for k in chained] == ["matmul", "reduction"]
    (value,) = chained[0].handoff_out.values
    assert value.nbytes == 256 * 512 * 4 and value.exclusive
    assert kept_in_sbuf(chained[0].handoff_out, get_target("trn2")) == (value,)
    apart = _kernels(_chain, *args)
    apart[0].handoff_out = apart[1].handoff_in = None
    assert _hbm(_feed(apart)) - _hbm(_feed(chained)) == 2 * value.nbytes


def test_intermediate_also_read_elsewhere_is_still_stored():
    def fn(x, w):
        y = torch.mm(x, w)
        return y.sum(-1), y          # y leaves the graph (as an activation saved for backward would)

    kernels = _kernels(fn, torch.randn(256, 128), torch.randn(128, 512))
    (value,) = kernels[0].handoff_out.values
    assert not value.exclusive
    apart = _kernels(fn, torch.randn(256, 128), torch.randn(128, 512))
    apart[0].handoff_out = apart[1].handoff_in = None
    assert _hbm(_feed(apart)) - _hbm(_feed(kernels)) == value.nbytes        # the read only


def test_intermediate_that_does_not_fit_goes_through_hbm():
    kernels = _kernels(_chain, torch.randn(256, 128), torch.randn(128, 512))
    small = get_target("trn2").derive(sbuf_bytes=1024 * 1024)
    assert small.sbuf_usable_bytes < kernels[0].handoff_out.values[0].nbytes * 2
    assert kept_in_sbuf(kernels[0].handoff_out, small) == ()


def _linear_t(x, w):
    return torch.mm(x, w.t())


def test_weight_transpose_is_paid_once_over_two_calls():
    x, w = torch.randn(512, 256), torch.randn(384, 256)
    kernels = _kernels(_linear_t, x, w, parameters=(1,))
    (layout,) = kernels[0].layouts
    assert layout.parameter == "w_1"
    session = _feed(kernels, calls=2)
    names = [op.name for op in session.trace.ops]
    assert names == ["layout_w_1", kernels[0].name, kernels[0].name]
    # each call's matmul reads the laid-out weight: it costs what a K-major operand costs
    laid_out = OpRecord(0, "aten::mm", (TensorDesc((512, 256), "float32"), TensorDesc((256, 384), "float32")),
                        (TensorDesc((512, 384), "float32"),))
    alone = Simulator("trn2").run(lower(laid_out, "trn2")).ops[0]
    for op in session.trace.ops[1:]:
        assert op.busy_ns == alone.busy_ns
        assert op.instruction_counts.get("tensor") == alone.instruction_counts.get("tensor")
    # the relayout is the transposing copy of the weight, once
    copy = OpRecord(0, "aten::clone", (TensorDesc((256, 384), "float32", (1, 256)),), (TensorDesc((256, 384), "float32"),))
    assert session.trace.ops[0].busy_ns == Simulator("trn2").run(lower(copy, "trn2")).ops[0].busy_ns


def test_activation_transpose_is_paid_every_call():
    kernels = _kernels(_linear_t, torch.randn(512, 256), torch.randn(384, 256))   # w is not a parameter
    assert kernels[0].layouts == ()
    session = _feed(kernels, calls=2)
    first, second = session.trace.ops
    assert first.busy_ns == second.busy_ns and first.instruction_counts["tensor"] > 0


def test_kernel_that_only_lays_out_parameters_is_hoisted():
    def fn(x, w):
        return torch.mm(x, w.t().contiguous())

    kernels = _kernels(fn, torch.randn(64, 128), torch.randn(256, 128), parameters=(1,))
    assert [k.hoisted for k in kernels] == [True, False]
    session = _feed(kernels, calls=2)
    assert [op.name for op in session.trace.ops] == [kernels[0].name, kernels[1].name, kernels[1].name]


def test_mark_parameters_by_position_and_backward_primal_names():
    gm = make_fx(lambda a, b, c: a + b + c, tracing_mode="fake")(*(torch.randn(2),) * 3)
    assert mark_parameters(gm.graph, static_inputs=(0, 2)) == 2
    assert [is_parameter(n) for n in gm.graph.nodes if n.op == "placeholder"] == [True, False, True]
    graph = torch.fx.Graph()
    for name in ("primals_2", "primals_3", "tangents_1"):
        graph.placeholder(name)
    assert mark_parameters(graph, static_inputs=(1,)) == 1
    assert [is_parameter(n) for n in graph.nodes] == [True, False, False]
