"""Convolutions: the products a conv op computes, and the engine each one runs on.

A forward conv is one window product; its backward is up to three more: grad_input (a
window product of grad_out with the flipped kernel), grad_weight (a GEMM over output
pixels) and grad_bias (a sum over pixels). Each product has candidate mappings: TensorE
implicit GEMMs with different tap packings (``conv_tensor``) and, for grouped convs, VectorE
per-channel multiply-accumulates (``conv_vector``). The candidates are simulated (inputs in
HBM) and the fastest program is emitted, as a kernel author would time the variants. Dense
convs take TensorE; depthwise convs usually take VectorE, because one input channel per group
leaves the PE rows idle.

A strided window product that scatters (grad_input of a strided conv, a ConvTranspose
forward) is split into stride^d phases, each a stride-1 gather with a sub-kernel, so no
inserted zeros are multiplied; phases that no tap reaches are zero-filled.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import product
from math import prod

from backend.lowering.builder import Builder, OpContext
from backend.lowering.conv_tensor import Emitter, tensor_kernel_gradient, tensor_window
from backend.lowering.conv_vector import vector_kernel_gradient, vector_window
from backend.lowering.data import zero_fill
from backend.lowering.registry import lowering
from backend.lowering.stream import plane_stream, plane_tiling, vec
from backend.sim.descriptors import TensorDesc
from backend.sim.ir import Program
from backend.sim.scheduler import Simulator

__all__ = ["WindowProduct", "KernelGradient", "window_product", "conv_products"]


@dataclass(frozen=True)
class WindowProduct:
    """dst[n, g, cd, o] = sum over cs < src_ch and taps j of w[g, cd, cs, j] * src[n, g, cs, i].

    Gather (``scatter`` False): o runs over dst, i = o*stride + j*dilation - padding.
    Scatter (True): i runs over src, o = i*stride + j*dilation - padding (a transposed conv).
    Operands are record positions; ``weight_k_contiguous``: the contracted channels are the
    weight's dim 1, so its K (channels x taps) is contiguous in memory.
    """

    src: int
    weight: int
    out: int
    bias: int | None
    batch: int
    groups: int
    src_ch: int
    dst_ch: int
    kernel: tuple
    stride: tuple
    dilation: tuple
    padding: tuple
    src_spatial: tuple
    dst_spatial: tuple
    scatter: bool
    weight_k_contiguous: bool

    @property
    def taps(self) -> int:
        return prod(self.kernel)

    def phases(self) -> tuple[dict, int]:
        """Stride-1 gathers this product is made of: ({sub-kernel: dst positions}, positions no tap reaches).

        Along a dim with stride s, output o receives tap j iff (o + padding - j*dilation) % s == 0,
        so the outputs of one residue class share one sub-kernel."""
        if not self.scatter:
            return {self.kernel: self.batch * prod(self.dst_spatial)}, 0
        per_dim = []
        for k, s, d, p, size in zip(self.kernel, self.stride, self.dilation, self.padding, self.dst_spatial):
            per_dim.append([(sum(1 for j in range(k) if (j * d) % s == r),
                             sum(1 for o in range(size) if (o + p) % s == r)) for r in range(s)])
        kernels: dict = defaultdict(int)
        unreached = 0
        for combo in product(*per_dim):
            sub = tuple(taps for taps, _ in combo)
            positions = self.batch * prod(count for _, count in combo)
            if min(sub) == 0:
                unreached += positions
            elif positions:
                kernels[sub] += positions
        return dict(kernels), unreached


@dataclass(frozen=True)
class KernelGradient:
    """dw[g, cs, cb, j] = sum over n, o of small[n, g, cs, o] * big[n, g, cb, o*stride + j*dilation - padding].

    For a conv, small is grad_out and big the input; for a transposed conv the other way round.
    """

    small: int
    big: int
    out: int
    bias: int | None          # grad_bias computed alongside (the sum of grad_out), or None
    batch: int
    groups: int
    small_ch: int
    big_ch: int
    kernel: tuple
    stride: tuple
    dilation: tuple
    small_spatial: tuple
    big_spatial: tuple

    @property
    def taps(self) -> int:
        return prod(self.kernel)


def _per_dim(value, nd: int, default: int) -> tuple:
    if value is None or isinstance(value, str) or value == [] or value == ():
        return (default,) * nd     # padding="same"/"valid": only the phases' residues would shift
    value = [value] if isinstance(value, int) else list(value)
    return tuple(value * nd if len(value) == 1 else value[-nd:])


def _geometry(x: TensorDesc, w: TensorDesc, attrs: dict) -> tuple:
    """(groups, c_in per group, c_out per group, kernel, stride, dilation, padding, transposed)."""
    groups = int(attrs.get("groups", 1) or 1)
    transposed = bool(attrs.get("transposed", False))
    kernel = tuple(w.shape[2:])
    nd = len(kernel)
    if transposed:      # weight [C_in, C_out/groups, *k]
        c_in, c_out = w.shape[0] // groups, w.shape[1]
    else:               # weight [C_out, C_in/groups, *k]
        c_in, c_out = w.shape[1], w.shape[0] // groups
    return (groups, c_in, c_out, kernel, _per_dim(attrs.get("stride"), nd, 1), _per_dim(attrs.get("dilation"), nd, 1),
            _per_dim(attrs.get("padding"), nd, 0), transposed)


def window_product(x: TensorDesc, w: TensorDesc, y: TensorDesc, attrs: dict, *, grad_input: bool,
                   src: int, weight: int, out: int, bias: int | None = None) -> WindowProduct:
    """The forward product (x -> y), or grad_input's (grad of y -> grad of x)."""
    groups, c_in, c_out, kernel, stride, dilation, padding, transposed = _geometry(x, w, attrs)
    scatter = transposed != grad_input
    if grad_input:
        src_ch, dst_ch, src_sp, dst_sp = c_out, c_in, y.shape[2:], x.shape[2:]
    else:
        src_ch, dst_ch, src_sp, dst_sp = c_in, c_out, x.shape[2:], y.shape[2:]
    if scatter and all(s == 1 for s in stride):
        # A stride-1 scatter is a gather with the flipped kernel and the complementary padding.
        scatter = False
        padding = tuple((k - 1) * d - p for k, d, p in zip(kernel, dilation, padding))
    return WindowProduct(src, weight, out, bias, x.shape[0], groups, src_ch, dst_ch, kernel, stride, dilation,
                         padding, tuple(src_sp), tuple(dst_sp), scatter, weight_k_contiguous=not scatter)


def simulated_ns(ctx: OpContext, emitters: list[Emitter]) -> float:
    """Time of the emitters' instructions alone on the target, their inputs in HBM."""
    program = Program(ctx.record.name)
    scratch = OpContext(ctx.record, ctx.target, Builder(program, ctx.target), out_to_hbm=list(ctx.out_to_hbm))
    for emit in emitters:
        emit(scratch)
    return Simulator(ctx.target).run(program).ops[0].time_ns


_PICKS: dict = {}               # record signature -> the candidate picked at each choice
_PICKS_MAX = 4096


class _Planner:
    """Picks among candidate emitters by simulating them: each phase of a window product alone
    (in phase order), then the window product's mappings and the kernel gradient's jointly, on
    the whole op's program. The picks are remembered per record signature, so the convs of a
    training loop are planned once."""

    def __init__(self, ctx: OpContext):
        self.ctx = ctx
        r = ctx.record
        self.key = (r.name, tuple((d.shape, d.dtype, d.strides) for d in (*r.inputs, *r.outputs)),
                    repr(sorted(r.attrs.items())), ctx.target)
        self.known = _PICKS.get(self.key)
        self.picks: list[int] = []

    def pick(self, options: list, cost) -> int:
        """Index of the option with the least ``cost(option)`` (or the remembered pick)."""
        if self.known is not None:
            index = self.known[len(self.picks)]
        else:
            index = min(range(len(options)), key=lambda i: cost(options[i])) if len(options) > 1 else 0
        self.picks.append(index)
        return index

    def window_mappings(self, p: WindowProduct) -> list[list[Emitter]]:
        """[TensorE phases] and, for grouped convs, [VectorE]; zero-filling what no tap reaches."""
        tensor: list[Emitter] = []
        for options in tensor_window(self.ctx, p):
            tensor.append(options[self.pick(options, lambda e: simulated_ns(self.ctx, [*tensor, e]))])
        mappings = [tensor] + ([[vector_window(self.ctx, p)]] if p.groups > 1 else [])
        _, unreached = p.phases()
        if unreached:
            out = self.ctx.outputs[p.out]
            fill = [lambda c: zero_fill(c, out, unreached * p.groups * p.dst_ch * out.itemsize)]
            mappings = [m + fill for m in mappings]
        return mappings

    def emit(self, combos: list[list[Emitter]]) -> None:
        chosen = combos[self.pick(combos, lambda emitters: simulated_ns(self.ctx, emitters))]
        if self.known is None:
            if len(_PICKS) >= _PICKS_MAX:
                _PICKS.clear()
            _PICKS[self.key] = tuple(self.picks)
        for emit in chosen:
            emit(self.ctx)


def _grad_bias(ctx: OpContext, out: int) -> None:
    """Per-plane sums on VectorE (planes on partitions), folded into channels by a selection-matrix
    matmul that accumulates every tile's partial sums in PSUM."""
    g, channels, t = ctx.inputs[0], ctx.outputs[out], ctx.target
    planes = g.shape[0] * g.shape[1]
    tiles, parts, _ = plane_tiling(ctx, planes, (0,), ())
    last = plane_stream(ctx, planes, lambda free: [vec("tensor_reduce", free(g), g.dtype, out_free=1, alu="add")],
                        loads=(0,), stores=())
    fold = ctx.b.matmul(k=parts, m=min(channels.numel, t.stationary_free_max), n=1, dtype="float32", deps=last,
                        repeat=tiles * -(-channels.numel // t.stationary_free_max))
    ev = ctx.b.compute("vector", "tensor_copy", free_size=1, partitions=min(channels.numel, t.partitions),
                       src="psum", deps=(fold,), out_dtype=channels.dtype)
    if ctx.out_to_hbm[out]:
        ctx.b.dma(channels.nbytes, src="sbuf", dst="hbm", partitions=min(channels.numel, t.partitions),
                  row_bytes=channels.itemsize, deps=(ev,))
    ctx.set_ready(out, (ev,))


def conv_products(ctx: OpContext) -> tuple[list, KernelGradient | None, int | None]:
    """(window products, kernel gradient, grad_bias output still to compute) a conv record computes."""
    if not ctx.record.name.endswith("backward") and not ctx.record.name.endswith("backward_overrideable"):
        x, w, y = ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]
        bias = 2 if len(ctx.inputs) > 2 and ctx.inputs[2].numel else None
        return [window_product(x, w, y, ctx.attrs, grad_input=False, src=0, weight=1, out=0, bias=bias)], None, None
    g, x, w = ctx.inputs[:3]
    # Outputs list only the gradients the mask asks for, in order.
    mask = [bool(m) for m in ctx.attrs.get("output_mask", (True, True, False))][:3]
    slot = {i: sum(mask[:i]) for i in range(len(mask)) if mask[i] and sum(mask[:i]) < len(ctx.outputs)}
    windows = [window_product(x, w, g, ctx.attrs, grad_input=True, src=0, weight=2, out=slot[0])] if 0 in slot else []
    bias = slot.get(2) if 2 in slot and ctx.outputs[slot[2]].numel else None
    if 1 not in slot:
        return windows, None, bias
    groups, c_in, c_out, kernel, stride, dilation, _, transposed = _geometry(x, w, ctx.attrs)
    # grad_bias sums grad_out: it joins the kernel gradient when grad_out is its small side.
    small, big = (1, 0) if transposed else (0, 1)
    kernel_grad = KernelGradient(small, big, slot[1], None if transposed else bias, x.shape[0], groups,
                                 c_in if transposed else c_out, c_out if transposed else c_in, kernel, stride,
                                 dilation, tuple(ctx.inputs[small].shape[2:]), tuple(ctx.inputs[big].shape[2:]))
    return windows, kernel_grad, bias if transposed else None


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
    plan = _Planner(ctx)
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
