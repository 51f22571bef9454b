"""The fusion pass: the kernels a Neuron compiler would form, and invariants on any graph."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

import backend.compile
from backend.compile.fusion import fuse, node_class, view_root
from backend.compile.kernels import build_kernels
from benchmarks.compile_bench import Block


def _ops(part, group):
    nodes = {n.name: n for n in part.graph_module.graph.nodes}
    return sorted(str(nodes[n].target).split(".")[1] for n in group.nodes
                  if node_class(nodes[n]) != "view")


def test_matmul_bias_gelu_is_one_kernel(neuron):
    w, b = torch.randn(16, 32, device=neuron), torch.randn(32, device=neuron)
    f = torch.compile(lambda x: F.gelu(x @ w + b), backend="neuron", fullgraph=True)
    f(torch.randn(8, 16, device=neuron))
    part = backend.compile.compiled_graphs()[0].forward
    (group,) = part.groups
    assert group.kind == "matmul"
    assert _ops(part, group) == ["add", "gelu", "mm"]


def test_linear_gelu_linear_residual(neuron):
    fc, out = nn.Linear(16, 64).to(neuron), nn.Linear(64, 16).to(neuron)
    f = torch.compile(lambda x: x + out(F.gelu(fc(x))), backend="neuron", fullgraph=True)
    with torch.no_grad():
        f(torch.randn(8, 16, device=neuron))
    part = backend.compile.compiled_graphs()[0].forward
    assert [_ops(part, g) for g in part.groups] == [["addmm", "gelu"], ["add", "addmm"]]


def test_layernorm_is_one_kernel_forward_and_backward(neuron):
    ln = nn.LayerNorm(32).to(neuron)
    x = torch.randn(4, 32, device=neuron, requires_grad=True)
    torch.compile(ln, backend="neuron")(x).sum().backward()
    graph = backend.compile.compiled_graphs()[0]
    (fw,) = graph.forward.groups
    assert fw.kind == "norm" and _ops(graph.forward, fw) == ["native_layer_norm"]
    assert any(_ops(graph.backward, g)[:1] == ["native_layer_norm_backward"] for g in graph.backward.groups)


def test_handwritten_rms_norm_is_one_kernel(neuron):
    w = torch.randn(32, device=neuron)

    def rms(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    torch.compile(rms, backend="neuron", fullgraph=True)(torch.randn(4, 32, device=neuron))
    (group,) = backend.compile.compiled_graphs()[0].forward.groups
    assert group.kind == "reduction"


def _attention_groups(options=None):
    block = Block(d=32, heads=4, seq=16).to("neuron")
    with torch.no_grad():
        torch.compile(block, backend="neuron", options=options)(torch.randn(2, 16, 32, device="neuron"))
    part = backend.compile.compiled_graphs()[-1].forward
    return part, [g for g in part.groups if "bmm" in _ops(part, g) or "_softmax" in _ops(part, g)]


def test_attention_stays_on_chip_when_it_fits(neuron):
    part, groups = _attention_groups()
    (attn,) = groups
    assert attn.kind == "attention"
    assert _ops(part, attn).count("bmm") == 2 and "_softmax" in _ops(part, attn)


def test_attention_splits_when_scores_do_not_fit(neuron):
    part, groups = _attention_groups({"sbuf_partition_bytes": 256})
    assert len(groups) >= 2 and all(g.kind != "attention" for g in groups)


def test_fusion_off_gives_one_kernel_per_op(neuron):
    w = torch.randn(16, 32, device=neuron)
    f = torch.compile(lambda x: F.gelu(x @ w + 1).view(-1).softmax(0), backend="neuron",
                      options={"fusion": False})
    f(torch.randn(8, 16, device=neuron))
    part = backend.compile.compiled_graphs()[0].forward
    assert part.kernel_count == part.op_count == 4   # mm, add, gelu, softmax; the view is free


# -- invariants on random graphs (make_fx: aten graphs without Dynamo) ---------------------------
_UNARY = [torch.relu, torch.tanh, lambda x: x * 2, lambda x: x.softmax(-1),
          lambda x: F.layer_norm(x, x.shape[-1:]), lambda x: x - x.mean(-1, keepdim=True),
          lambda x: x.t().contiguous().t(), lambda x: x.reshape(-1).reshape(x.shape)]


@st.composite
def programs(draw):
    steps = draw(st.lists(st.tuples(st.sampled_from(["unary", "matmul", "add_prev"]),
                                    st.integers(0, len(_UNARY) - 1)), min_size=1, max_size=8))
    return steps


def _build(steps):
    def f(x, w):
        values = [x]
        for kind, i in steps:
            v = values[-1]
            if kind == "unary":
                v = _UNARY[i](v)
            elif kind == "matmul":
                v = v @ w
            else:
                v = v + values[i % len(values)]
            values.append(v)
        return values[-1], values[len(values) // 2]
    return f


@settings(max_examples=40, deadline=None)
@given(programs())
def test_fusion_invariants_on_random_graphs(steps):
    f = _build(steps)
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    gm = make_fx(f, tracing_mode="fake")(x, w)
    groups = fuse(gm.graph)
    compute = [n for n in gm.graph.nodes if node_class(n) not in ("io", "view")]
    owner = {}
    for g in groups:
        for name in g.nodes:
            assert name not in owner, f"{name} in two kernels"
            owner[name] = g.index
    # every op is in exactly one kernel; views only ride along
    assert {n.name for n in compute} <= set(owner)
    # kernels form a DAG in creation order: inputs come from older kernels or the graph inputs
    for node in compute:
        for i in node.all_input_nodes:
            root = view_root(i)
            if root.name in owner and owner[root.name] != owner[node.name]:
                assert owner[root.name] < owner[node.name]
    # each kernel's recorded traffic saving is between nothing and all of its ops' traffic
    for kernel in build_kernels(gm, groups):
        assert 0 <= kernel.internal_bytes_saved <= kernel.hbm_bytes_unfused
        assert len(kernel.records) == sum(1 for n in kernel.nodes if node_class(
            next(m for m in gm.graph.nodes if m.name == n)) != "view")
