"""Grouped (above all depthwise) convolutions on VectorE: per-channel multiply-accumulates.

With one input channel per group a conv has almost nothing for the PE array to contract:
block-diagonal weights put up to 128 groups in one matmul, but each tap is still a full
matmul whose PE array multiplies mostly zeros (at 1/4 rate in fp32). VectorE instead puts
(image, channel, band of rows) on partitions, so all 128 lanes do useful work, and runs one
``scalar_tensor_tensor`` per (input channel, tap): acc = window * w[c, tap] + acc, with the
weight a per-partition scalar and the window a shifted access pattern of the SBUF band. Its
ISA cost is tensor_tensor's (2N cycles; N only for bf16 subtract-then-multiply), so it is
costed as a ``tensor_tensor`` with alu ``multiply_add``. A band's input carries the halo rows
its windows reach past the band. ``planner`` simulates this mapping and TensorE's and runs the
faster, so a bf16 depthwise conv, where TensorE runs at 4x its fp32 rate, may still go to TensorE.

grad_weight is per tap a product (tensor_tensor multiply) and a free-axis sum (tensor_reduce)
of the grad_out band and the input window, then one selection-matrix matmul per tile folds
the partitions' partial sums into channels in PSUM.
"""
from __future__ import annotations

from math import ceil, prod

from backend.lowering.builder import Emitter, OpContext, itemsize
from backend.lowering.conv.geometry import KernelGradient, WindowProduct, halo_rows
from backend.lowering.stream import Stage, TileIO, stream
from backend.sim import assumptions
from backend.sim.presets import NeuronConfig

__all__ = ["vector_window", "vector_kernel_gradient", "band_tiling"]


def band_tiling(planes: int, rows: int, band_bytes, target: NeuronConfig) -> tuple[int, int, int]:
    """(rows per band, tiles, partitions): each plane is cut into bands of rows, enough bands for
    the planes to fill the partitions and few enough rows for a band's operands to fit their
    SBUF share. ``band_bytes(r)`` is the bytes one partition holds for a band of r rows."""
    bands = min(rows, max(1, ceil(target.partitions / planes)))
    buffers, share = assumptions.value("conv.band_buffers"), assumptions.value("stream.plane_bytes_per_partition")
    while bands < rows and buffers * band_bytes(ceil(rows / bands)) > share:
        bands = min(rows, bands + max(1, bands // 4))
    band_rows = ceil(rows / bands)
    slots = planes * ceil(rows / band_rows)
    parts = min(target.partitions, slots)
    return band_rows, ceil(slots / parts), parts


def _mac(free: int, dtype: str, count: int) -> Stage:
    """``count`` scalar_tensor_tensor multiply-accumulates over ``free`` elements."""
    return Stage("vector", "tensor_tensor", free, count=count, dtype=dtype, n_inputs=2, flops=2 * free,
                 attrs={"alu": "multiply_add"})


def _once(ctx: OpContext, index: int, per_partition: int, parts: int) -> TileIO:
    """An operand every partition needs a slice of (weights, bias), read from HBM once."""
    desc = ctx.inputs[index]
    return TileIO(index, parts * per_partition * desc.itemsize, per_partition * desc.itemsize, parts, once=True,
                  hbm_bytes=desc.nbytes)


def vector_window(ctx: OpContext, p: WindowProduct) -> Emitter:
    """A window product with (image, dst channel, band) on partitions.

    Gather: each tap is one MAC over the band's outputs (the first, w * x + bias, a tensor_scalar).
    Scatter (strided transposed): the band is zeroed, then each tap adds its src elements into
    a strided view, 1/prod(stride) of the band's outputs per tap."""
    t = ctx.target
    src, out = ctx.inputs[p.src], ctx.outputs[p.out]
    planes = p.batch * p.groups * p.dst_ch
    dst_row, src_row = prod(p.dst_spatial[1:]), prod(p.src_spatial[1:])
    k0, s0, d0, src_rows = p.kernel[0], p.stride[0], p.dilation[0], p.src_spatial[0]

    def src_band(rows: int) -> int:
        if p.scatter:
            return min(src_rows, ceil((rows + (k0 - 1) * d0) / s0))
        return halo_rows(rows, k0, s0, d0, src_rows)

    def band_bytes(rows: int) -> int:
        return p.src_ch * src_band(rows) * src_row * src.itemsize + rows * dst_row * out.itemsize

    band, tiles, parts = band_tiling(planes, p.dst_spatial[0], band_bytes, t)
    dst_free, src_free = band * dst_row, src_band(band) * src_row
    macs = p.src_ch * p.taps
    if p.scatter:
        stages = [Stage("vector", "memset", dst_free, dtype=out.dtype, attrs={"value": 0}),
                  _mac(ceil(dst_free / prod(p.stride)), src.dtype, macs)]
    else:
        stages = [Stage("vector", "tensor_scalar", dst_free, dtype=src.dtype, flops=2 * dst_free)]
        if macs > 1:
            stages.append(_mac(dst_free, src.dtype, macs - 1))
    loads = [TileIO(p.src, parts * p.src_ch * src_free * src.itemsize, src_free * src.itemsize, parts),
             _once(ctx, p.weight, macs, parts)]
    if p.bias is not None:
        loads.append(_once(ctx, p.bias, 1, parts))
    stores = [TileIO(p.out, parts * dst_free * out.itemsize, dst_free * out.itemsize, parts)]
    return lambda c: stream(c, tiles=tiles, partitions=parts, stages=stages, loads=loads, stores=stores,
                            bufs=assumptions.value("conv.band_buffers"))


def vector_kernel_gradient(ctx: OpContext, kg: KernelGradient) -> Emitter:
    """grad_weight with (image, small channel, band) on partitions; per (big channel, tap) a product
    and a free-axis sum (and the band's own sum for grad_bias), then the partitions' partial sums
    are folded into channels on TensorE."""
    t = ctx.target
    small, big, out = ctx.inputs[kg.small], ctx.inputs[kg.big], ctx.outputs[kg.out]
    planes = kg.batch * kg.groups * kg.small_ch
    small_row, big_row = prod(kg.small_spatial[1:]), prod(kg.big_spatial[1:])

    def big_band(rows: int) -> int:
        return halo_rows(rows, kg.kernel[0], kg.stride[0], kg.dilation[0], kg.big_spatial[0])

    def band_bytes(rows: int) -> int:
        return rows * small_row * small.itemsize + kg.big_ch * big_band(rows) * big_row * big.itemsize

    band, tiles, parts = band_tiling(planes, kg.small_spatial[0], band_bytes, t)
    free, big_free = band * small_row, big_band(band) * big_row
    products = kg.big_ch * kg.taps
    sums = products + (kg.bias is not None)       # grad_bias: the band's own sum
    stages = [Stage("vector", "tensor_tensor", free, count=products, dtype=small.dtype, n_inputs=2, flops=free,
                    attrs={"alu": "multiply"}),
              Stage("vector", "tensor_reduce", free, count=sums, dtype=small.dtype, flops=free, out_free=1,
                    attrs={"alu": "add"})]
    loads = [TileIO(kg.small, parts * free * small.itemsize, free * small.itemsize, parts),
             TileIO(kg.big, parts * kg.big_ch * big_free * big.itemsize, big_free * big.itemsize, parts)]
    channels = min(kg.groups * kg.small_ch, t.stationary_free_max)
    moving_tiles = ceil(sums / t.moving_free_max)

    def emit(c: OpContext) -> None:
        b = c.builder
        last = stream(c, tiles=tiles, partitions=parts, stages=stages, loads=loads, stores=[], bufs=assumptions.value("conv.band_buffers"))
        fold = b.matmul(k=parts, m=channels, n=min(sums, t.moving_free_max), dtype="float32", deps=last,
                        repeat=tiles * moving_tiles)
        blocks = ceil(kg.groups * kg.small_ch / t.partitions)
        ev = b.compute("vector", "tensor_copy", free_size=sums, partitions=channels, src="psum", deps=(fold,),
                       out_dtype=out.dtype, repeat=blocks)
        if c.out_to_hbm[kg.out]:
            stored = out.nbytes + (c.outputs[kg.bias].nbytes if kg.bias is not None else 0)
            b.dma(stored, src="sbuf", dst="hbm", partitions=channels, row_bytes=products * itemsize(out.dtype),
                  deps=(ev,))
        c.set_ready(kg.out, (ev,))

    return emit
