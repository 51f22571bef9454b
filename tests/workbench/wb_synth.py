"""Synthetic but realistic traces of transformer blocks for the workbench tests.

The builder schedules instructions the way the simulator does: each engine and DMA queue is an
in-order stream, an instruction starts when its engine is free and its inputs are ready, and
every eager op loads from HBM and stores back to HBM. Matmuls tile onto TensorE with weight DMAs
spread over the 16 queues, norms run on VectorE, activations on ScalarE, masks on GpSimdE; one op
per block falls back to the host and one is a fused compiled kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from backend.sim.trace import InstructionEvent, OpSummary, Trace, engine_class

__all__ = ["TraceBuilder", "transformer_trace", "NEURON_ENGINES"]

NEURON_ENGINES = ("tensor", "vector", "scalar", "gpsimd", *(f"dma{q}" for q in range(16)), "host")
LAUNCH_NS = 2_000.0          # eager launch overhead between ops
TRN2_PEAK_FLOPS = 79e12
TRN2_HBM_BYTES_PER_S = 2.9e12 / 8


@dataclass
class TraceBuilder:
    """Appends ops made of instructions to a Trace with per-engine in-order clocks."""

    target: str = "trn2"
    max_events: int = 200_000
    trace: Trace = field(init=False)
    clock: dict = field(default_factory=dict)
    now_ns: float = 0.0
    allocated_bytes: int = 0
    live: list = field(default_factory=list)      # output sizes still allocated, oldest first
    _queue: int = 0

    def __post_init__(self):
        self.trace = Trace(target=self.target, device_kind="neuron", peak_flops_per_s=TRN2_PEAK_FLOPS,
                           hbm_bytes_per_s=TRN2_HBM_BYTES_PER_S, max_events=self.max_events,
                           engines=NEURON_ENGINES)

    def next_queue(self) -> str:
        self._queue = (self._queue + 1) % 16
        return f"dma{self._queue}"

    def op(self, name: str, kind: str, instructions, *, inputs="", outputs="", source=None, nodes=(),
           hbm=(0, 0), sbuf=(0, 0), psum=(0, 0), alloc_bytes: int = 0) -> OpSummary:
        """Schedule ``instructions`` [(engine, opcode, cost_ns, bytes, flops, dependent)].

        A dependent instruction waits for everything issued before it in this op; the others
        (prefetch loads) start as soon as their engine is free.
        """
        index = len(self.trace.ops)
        start = self.now_ns + LAUNCH_NS
        ready = start
        busy: dict = {}
        flops = 0
        end = start
        for engine, opcode, cost_ns, nbytes, nflops, dependent in instructions:
            begin = max(self.clock.get(engine, 0.0), start, ready if dependent else start)
            finish = begin + cost_ns
            self.clock[engine] = finish
            ready = max(ready, finish)
            end = max(end, finish)
            cls = engine_class(engine)
            busy[cls] = busy.get(cls, 0.0) + cost_ns
            flops += nflops
            self.trace.add_event(InstructionEvent(begin, finish, engine, opcode, index, nbytes, nflops))
        self.now_ns = end
        op = OpSummary(index, name, kind, start, end, busy, hbm[0], hbm[1], sbuf[0], sbuf[1], psum[0],
                       psum[1], flops, len(instructions), inputs, outputs, source, tuple(nodes))
        self.trace.ops.append(op)
        if alloc_bytes:
            # Activations die a few ops later, as in a forward pass; the sawtooth is realistic.
            self.allocated_bytes += alloc_bytes
            self.live.append(alloc_bytes)
            self.trace.hbm_timeline.append((start, self.allocated_bytes))
            while len(self.live) > 4:
                self.allocated_bytes -= self.live.pop(0)
            self.trace.hbm_timeline.append((end, self.allocated_bytes))
        return op

    # -- op families -------------------------------------------------------------------------
    def matmul(self, m: int, k: int, n: int, *, source=None, name="aten::mm") -> OpSummary:
        tiles_k, tiles_m, tiles_n = -(-k // 128), -(-m // 128), -(-n // 512)
        insts = []
        for _ in range(tiles_k):
            insts.append((self.next_queue(), "dma_hbm_to_sbuf", 1_400.0, 128 * 512 * 2, 0, False))
        for _ in range(tiles_m * tiles_n):
            for _ in range(tiles_k):
                insts.append(("tensor", "nc_matmul", 512 / 2.4, 0, 2 * 128 * 128 * 512, True))
            insts.append(("vector", "tensor_copy", 64 / 0.96 + 512 / 0.96, 0, 0, True))
            insts.append((self.next_queue(), "dma_sbuf_to_hbm", 1_400.0, 128 * 512 * 2, 0, True))
        a, b, c = m * k * 2, k * n * 2, m * n * 2
        return self.op(name, "op", insts, inputs=f"[{m}, {k}], [{k}, {n}]", outputs=f"[{m}, {n}]",
                       source=source, hbm=(a + b, c), sbuf=(a + b + c, a + b + c), psum=(c * 2, c * 2),
                       alloc_bytes=c)

    def elementwise(self, name: str, engine: str, opcode: str, numel: int, *, passes=1, source=None):
        per_tile = 128 * 2048
        tiles = max(1, -(-numel // per_tile))
        insts = []
        for _ in range(tiles):
            insts.append((self.next_queue(), "dma_hbm_to_sbuf", 1_400.0, per_tile * 2, 0, False))
            for p in range(passes):
                insts.append((engine, opcode if p == 0 else "tensor_scalar", 2048 / 1.2, 0, per_tile, True))
            insts.append((self.next_queue(), "dma_sbuf_to_hbm", 1_400.0, per_tile * 2, 0, True))
        nbytes = numel * 2
        return self.op(name, "op", insts, inputs=f"[{numel}]", outputs=f"[{numel}]", source=source,
                       hbm=(nbytes, nbytes), sbuf=(nbytes * passes, nbytes * passes),
                       alloc_bytes=nbytes)

    def fallback(self, name: str, numel: int, *, source=None):
        nbytes = numel * 4
        insts = [(self.next_queue(), "dma_device_to_host", 5_000.0, nbytes, 0, False),
                 ("host", "cpu_kernel", 40_000.0, 0, 0, True),
                 (self.next_queue(), "dma_host_to_device", 5_000.0, nbytes, 0, True)]
        return self.op(name, "fallback", insts, inputs=f"[{numel}]", outputs=f"[{numel}]",
                       source=source, hbm=(nbytes, nbytes))

    def fused_kernel(self, name: str, numel: int, nodes, *, source=None):
        per_tile = 128 * 2048
        tiles = max(1, -(-numel // per_tile))
        insts = []
        for _ in range(tiles):
            insts.append((self.next_queue(), "dma_hbm_to_sbuf", 1_400.0, per_tile * 2, 0, False))
            insts.append(("vector", "tensor_tensor", 2048 / 0.96, 0, per_tile, True))
            insts.append(("scalar", "activation", 2048 / 1.2, 0, per_tile * 8, True))
            insts.append(("gpsimd", "affine_select", (150 + 2048) / 1.2, 0, 0, True))
            insts.append((self.next_queue(), "dma_sbuf_to_hbm", 1_400.0, per_tile * 2, 0, True))
        nbytes = numel * 2
        return self.op(name, "kernel", insts, inputs=f"[{numel}]", outputs=f"[{numel}]",
                       source=source, nodes=nodes, hbm=(nbytes, nbytes), sbuf=(3 * nbytes, 3 * nbytes))

    def view(self, name: str):
        return self.op(name, "view", [])


def transformer_trace(layers: int = 2, seq: int = 128, d_model: int = 256, max_events: int = 200_000,
                      target: str = "trn2") -> Trace:
    """A Trace of ``layers`` transformer blocks (attention + MLP) on a [seq, d_model] batch."""
    b = TraceBuilder(target=target, max_events=max_events)
    tokens = seq * d_model
    for layer in range(layers):
        src = f"model.py:{40 + layer % 3}"
        b.elementwise("aten::native_layer_norm", "vector", "bn_stats", tokens, passes=3, source="model.py:12")
        b.matmul(seq, d_model, 3 * d_model, source="model.py:20", name="aten::addmm")
        b.view("aten::view")
        b.matmul(seq, d_model, seq, source="model.py:22", name="aten::bmm")
        b.fused_kernel("fused_mask_softmax", seq * seq, ("where", "amax", "sub", "exp", "div"), source=src)
        b.matmul(seq, seq, d_model, source="model.py:24", name="aten::bmm")
        b.matmul(seq, d_model, d_model, source="model.py:25", name="aten::addmm")
        b.elementwise("aten::add", "vector", "tensor_tensor", tokens, source="model.py:26")
        b.elementwise("aten::native_layer_norm", "vector", "bn_stats", tokens, passes=3, source="model.py:28")
        b.matmul(seq, d_model, 4 * d_model, source="model.py:30", name="aten::addmm")
        b.elementwise("aten::gelu", "scalar", "activation", 4 * tokens, source="model.py:31")
        b.fallback("aten::_unique2", seq, source="model.py:33")
        b.matmul(seq, 4 * d_model, d_model, source="model.py:34", name="aten::addmm")
        b.elementwise("aten::add", "vector", "tensor_tensor", tokens, source="model.py:35")
    return b.trace
