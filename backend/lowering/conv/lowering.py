"""The registered conv lowering: a conv record's products, each mapped by the planner, plus grad_bias."""
from __future__ import annotations

from backend.lowering.builder import Emitter, OpContext
from backend.lowering.conv.geometry import conv_products
from backend.lowering.conv.planner import Planner
from backend.lowering.conv.tensor_engine import tensor_kernel_gradient
from backend.lowering.conv.vector_engine import vector_kernel_gradient
from backend.lowering.data import zero_fill
from backend.lowering.registry import lowering
from backend.lowering.stream import plane_stream, plane_tiling, vector_stage

__all__: list[str] = []         # importing registers the lowering


def _grad_bias(ctx: OpContext, out: int) -> None:
    """Per-plane sums on VectorE (planes on partitions), folded into channels by a selection-matrix
    matmul that accumulates every tile's partial sums in PSUM."""
    g, channels, t = ctx.inputs[0], ctx.outputs[out], ctx.target
    planes = g.shape[0] * g.shape[1]
    tiles, parts, _ = plane_tiling(ctx, planes, (0,), ())
    last = plane_stream(ctx, planes,
                        lambda free: [vector_stage("tensor_reduce", free(g), g.dtype, out_free=1, alu="add")],
                        loads=(0,), stores=())
    fold = ctx.builder.matmul(k=parts, m=min(channels.numel, t.stationary_free_max), n=1, dtype="float32", deps=last,
                        repeat=tiles * -(-channels.numel // t.stationary_free_max))
    ev = ctx.builder.compute("vector", "tensor_copy", free_size=1, partitions=min(channels.numel, t.partitions),
                       src="psum", deps=(fold,), out_dtype=channels.dtype)
    if ctx.out_to_hbm[out]:
        ctx.builder.dma(channels.nbytes, src="sbuf", dst="hbm", partitions=min(channels.numel, t.partitions),
                  row_bytes=channels.itemsize, deps=(ev,))
    ctx.set_ready(out, (ev,))


@lowering("aten::convolution", "aten::_convolution", "aten::convolution_overrideable",
          "aten::conv1d", "aten::conv2d", "aten::conv3d",
          "aten::convolution_backward", "aten::convolution_backward_overrideable")
def _convolution(ctx: OpContext) -> None:
    if not any(out.numel for out in ctx.outputs):
        return
    if not all(t.numel for t in ctx.inputs[:3]):       # nothing to multiply: the outputs are zeros
        for out in ctx.outputs:
            zero_fill(ctx, out)
        return
    windows, kernel_grad, bias_out = conv_products(ctx)
    plan = Planner(ctx)
    combos: list[list[Emitter]] = [[]]
    for p in windows:
        combos = [c + m for c in combos for m in plan.window_mappings(p)]
    if kernel_grad is not None:
        candidates = tensor_kernel_gradient(ctx, kernel_grad)
        if kernel_grad.groups > 1:
            candidates.append(vector_kernel_gradient(ctx, kernel_grad))
        combos = [c + [k] for c in combos for k in candidates]
    if bias_out is not None:
        combos = [c + [lambda c_: _grad_bias(c_, bias_out)] for c in combos]
    plan.emit(combos)
    if kernel_grad is not None and kernel_grad.bias is not None:
        ctx.set_ready(kernel_grad.bias, ctx.out_ready[kernel_grad.out] or ())
