"""Ops that used to run as host fallbacks or fail to cost (in-place activations, the as_strided
family, empty reductions), and conv kernel gradients whose candidates overflowed SBUF."""
import logging

import pytest
import torch

import workbench as wb
from backend.lowering import lower
from backend.lowering.builder import Builder, OpContext
from backend.lowering.conv.geometry import conv_products
from backend.lowering.conv.tensor_engine import _kernel_gradient, tap_packings
from backend.sim import OpRecord, Simulator, TensorDesc, get_target
from backend.sim.ir import Program

TRN2 = get_target("trn2")


def _kinds(profile) -> dict:
    return dict(zip(profile.ops["name"], profile.ops["kind"]))


def test_in_place_activations_and_strided_copies_are_lowered(neuron):
    x = torch.randn(4, 8, device=neuron)
    with wb.profile() as p:
        torch.nn.functional.hardswish(x.clone(), inplace=True)
        torch.nn.functional.hardsigmoid(x.clone(), inplace=True)
        torch.as_strided_copy(x, (3, 4), (4, 1), 2)
        torch.as_strided_scatter(x, torch.ones(3, 4, device=neuron), (3, 4), (4, 1), 2)
        torch.slice_scatter(x, torch.ones(2, 8, device=neuron), 0, 1, 3)
        x.clone().as_strided_((3, 4), (4, 1), 1).unsqueeze_(0).squeeze_(0).t_()
    kinds = _kinds(p)
    assert len(p.fallbacks) == 0, p.fallbacks
    for name in ("aten::hardswish_", "aten::hardsigmoid_", "aten::as_strided_copy",
                 "aten::as_strided_scatter", "aten::slice_scatter"):
        assert kinds[name] == "op", name
    for name in ("aten::as_strided_", "aten::unsqueeze_", "aten::squeeze_", "aten::t_"):
        assert kinds[name] == "view", name


def test_hardswish_forward_and_backward_stay_on_the_device(neuron):
    x = torch.randn(4, 8, device=neuron, requires_grad=True)
    with wb.profile() as p:
        torch.nn.functional.hardswish(x).sum().backward()
        torch.nn.functional.hardsigmoid(x)
    kinds = _kinds(p)
    assert kinds["aten::hardswish"] == kinds["aten::hardswish_backward"] == kinds["aten::hardsigmoid"] == "op"


def test_scatter_into_a_view_copies_the_base_then_writes_the_source():
    base, src = TensorDesc((64, 64), "float32"), TensorDesc((16, 64), "float32")
    program = lower(OpRecord(0, "aten::slice_scatter", (base, src), (base,), {"dim": 0}), "trn2")
    op = Simulator("trn2").run(program).ops[0]
    assert op.hbm_read_bytes == base.nbytes + src.nbytes
    assert op.hbm_write_bytes == base.nbytes + src.nbytes


@pytest.mark.parametrize("shape,reduce", [((0, 4), lambda t: t.sum(0)), ((0, 4), lambda t: t.mean(0)),
                                          ((3, 0), lambda t: t.sum(1)), ((0, 4), lambda t: t.sum())])
def test_an_empty_reduction_writes_its_identity_and_costs_a_fill(neuron, shape, reduce):
    with wb.profile() as p:
        out = reduce(torch.empty(*shape, device=neuron))
    torch.testing.assert_close(out.cpu(), reduce(torch.empty(*shape)), equal_nan=True)
    row = p.ops.iloc[-1]
    assert row["kind"] == "op" and row["hbm_bytes"] == out.numel() * out.element_size()


def _patch_embedding_gradient_context():
    """The kernel gradient of a ViT-B/16 patch embedding (Conv2d(3, 768, 16, 16) on 224x224)."""
    grad, x, w = TensorDesc((1, 768, 14, 14), "float32"), TensorDesc((1, 3, 224, 224), "float32"), \
        TensorDesc((768, 3, 16, 16), "float32")
    record = OpRecord(0, "aten::convolution_backward", (grad, x, w), (x, w, TensorDesc((768,), "float32")),
                      {"stride": [16, 16], "padding": [0, 0], "dilation": [1, 1], "transposed": False,
                       "output_padding": [0, 0], "groups": 1, "bias_sizes": [768],
                       "output_mask": [False, True, False]})

    def context():
        return OpContext(record, TRN2, Builder(Program(record.name), TRN2))
    return context, conv_products(context())[1]


def test_every_patch_embedding_kernel_gradient_candidate_fits_sbuf_and_counts_its_spills():
    context, kg = _patch_embedding_gradient_context()
    assert kg is not None
    reads = {}
    for window_blocks, copy_ch in tap_packings(kg.big_ch, kg.kernel, TRN2.partitions):
        ctx = context()
        _kernel_gradient(ctx, kg, 1, window_blocks, copy_ch)
        assert ctx.builder.program.info.sbuf_peak_bytes <= TRN2.sbuf_usable_bytes, (window_blocks, copy_ch)
        reads[copy_ch] = Simulator(TRN2).run(ctx.builder.program).ops[0].hbm_read_bytes
    # The windows are read once whatever the piece count, so the extra reads of the candidates
    # with more input copies than SBUF holds are grad_out's tile re-read for every piece.
    grad_bytes = 768 * 14 * 14 * 4
    assert reads[96] >= reads[3] + grad_bytes
    assert reads[768] > reads[96]


def test_vit_patch_embedding_forward_backward_logs_no_sbuf_warning(neuron, caplog):
    conv = torch.nn.Conv2d(3, 768, 16, 16).to(neuron)
    x = torch.randn(1, 3, 224, 224, device=neuron, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger="backend.sim.scheduler"), wb.profile() as p:
        conv(x).sum().backward()
    assert not [r for r in caplog.records if "of SBUF" in r.getMessage()]
    assert p.ops["kind"].eq("fallback").sum() == 0
