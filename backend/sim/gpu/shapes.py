"""The GEMM a matrix-unit op runs as, read from its OpRecord descriptors.

Only the problem's geometry lives here; its FLOPs come from ``backend.sim.flops`` and the
ratio of the two becomes the tile model's ``work_scale``. Ops whose geometry is not known here
(convolution backward, for one) return None and are costed without shape losses.
"""
from __future__ import annotations

from math import prod

from backend.sim.flops import base_name
from backend.sim.descriptors import OpRecord
from backend.sim.gpu.tiling import GemmShape

__all__ = ["gemm_shape"]

# Ops whose first tensor input is a bias/accumulator and whose operands follow it.
_ACCUMULATE_FIRST = {"aten::addmm", "aten::baddbmm", "aten::addmv", "aten::addbmm"}
_PLAIN_PRODUCTS = {"aten::mm", "aten::bmm", "aten::matmul", "aten::mv", "aten::dot",
                   "aten::vdot", "aten::_scaled_mm", *_ACCUMULATE_FIRST}
_CONVOLUTIONS = {"aten::convolution", "aten::_convolution", "aten::convolution_overrideable",
                 "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_slow_conv2d_forward"}


def _product_shape(name: str, record: OpRecord) -> GemmShape:
    left = record.inputs[1 if name in _ACCUMULATE_FIRST else 0]
    k = left.shape[-1] if left.shape else 1
    out = record.outputs[0].shape
    if name == "aten::addbmm":            # a batch of products summed into one [M, N]
        return GemmShape(out[-2], out[-1], k, left.shape[0])
    if len(out) >= 2:
        return GemmShape(out[-2], out[-1], k, prod(out[:-2]))
    return GemmShape(out[0] if out else 1, 1, k)


def _linear_shape(record: OpRecord) -> GemmShape:
    # linear flattens its leading dims into one M, as the mm it dispatches to does.
    x, w = record.inputs[0], record.inputs[1]
    return GemmShape(max(1, x.numel // x.shape[-1]), w.shape[0], x.shape[-1])


def _conv_shape(record: OpRecord) -> GemmShape:
    # Implicit GEMM per group: M = batch x spatial points, N = weight dim 0 per group,
    # K = weight dim 1 x filter taps. Transposed convs scatter from the input's points.
    x, w, out = record.inputs[0].shape, record.inputs[1].shape, record.outputs[0].shape
    groups = int(record.attrs.get("groups", 1)) or 1
    points = (x if record.attrs.get("transposed", False) else out)[2:]
    return GemmShape(x[0] * prod(points), max(1, w[0] // groups), w[1] * prod(w[2:]), groups)


def _attention_shape(record: OpRecord, first: int) -> GemmShape:
    # FlashAttention: a CTA owns a block of query rows (M = Lq) for one head and loops over
    # keys (K = Lk), producing [Lq, Dv] (N = Dv); the two products are work_scale ~2. With
    # grouped-query attention and no causal mask, a KV head's group of query heads packs into
    # one block of rows (FlashAttention's and FlashInfer's decode GQA packing).
    q, k, v = (t.shape for t in record.inputs[first:first + 3])
    heads, kv_heads = prod(q[:-2]), max(1, prod(k[:-2]))
    group = 1 if record.attrs.get("is_causal", False) else max(1, heads // kv_heads)
    return GemmShape(q[-2] * group, v[-1], k[-2], heads // group)


def gemm_shape(record: OpRecord) -> GemmShape | None:
    """The GEMM-equivalent shape of a matmul-like op, or None when it is not known."""
    name = base_name(record.name)
    if not record.outputs or not record.inputs:
        return None
    if name in _PLAIN_PRODUCTS:
        return _product_shape(name, record)
    if name == "aten::linear":
        return _linear_shape(record)
    if name in _CONVOLUTIONS:
        return _conv_shape(record)
    if "scaled_dot_product" in name:
        return _attention_shape(record, 1 if name.endswith("_backward") else 0)
    return None
