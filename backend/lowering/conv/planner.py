"""Picks a conv's mapping by simulating the candidates, as a kernel author would time the variants.

Each product has candidate mappings: TensorE implicit GEMMs with different tap packings
(``tensor_engine``) and, for grouped convs, VectorE per-channel multiply-accumulates
(``vector_engine``). The candidates are simulated (inputs in HBM) and the fastest program is
emitted. Dense convs take TensorE; depthwise convs usually take VectorE, because one input
channel per group leaves the PE rows idle. Phases of a window product that no tap reaches are
zero-filled.
"""
from __future__ import annotations

from backend.lowering.builder import Builder, Emitter, OpContext
from backend.lowering.conv.geometry import WindowProduct
from backend.lowering.conv.tensor_engine import tensor_window
from backend.lowering.conv.vector_engine import vector_window
from backend.lowering.data import zero_fill
from backend.sim import assumptions
from backend.sim.ir import Program
from backend.sim.scheduler import Simulator

__all__ = ["Planner", "simulated_ns"]


def simulated_ns(ctx: OpContext, emitters: list[Emitter]) -> float:
    """Time of the emitters' instructions alone on the target, their inputs in HBM."""
    program = Program(ctx.record.name)
    scratch = OpContext(ctx.record, ctx.target, Builder(program, ctx.target), out_to_hbm=list(ctx.out_to_hbm))
    for emit in emitters:
        emit(scratch)
    return Simulator(ctx.target).run(program).ops[0].time_ns


_PICKS: dict = {}               # record signature -> the candidate picked at each choice
assumptions.on_change(_PICKS.clear)     # picks follow costs: a sensitivity pass re-plans
_PICKS_MAX = 4096


class Planner:
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
