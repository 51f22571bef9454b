"""What one serving iteration costs on a target, measured by running the real model timing-only.

A prefill of ``n`` new tokens over ``c`` cached ones and a decode step of ``b`` sequences at
context ``c`` are timed by running the model's forward (built from its config, data-free)
through the same lowering and simulator as any profile: ``wb.profile(device=..., target=...,
timing_only=True)``. Two builds, of one and two layers, give the cost of a layer and of the rest
(embedding, final norm, LM head on the last token): ``T(L) = T(1) + (L - 1) * (T(2) - T(1))``, so a
70B model needs no more host memory or time than two of its layers.

Serving engines run compiled graphs, and so does the measurement by default (``compiled=True``):
the forward goes through ``torch.compile(backend="neuron")`` with Dynamo's automatic dynamic
shapes. NxD Inference and vLLM-neuron compile a graph per bucket; the measurement compiles the
first shape static and, once a size changes, one graph with symbolic sizes (re-traced only where a
size of 0 or 1 or a branch of the model specialises it), whose kernels the backend fuses and
costs per concrete shape exactly as a static compile of that shape would
(``tests/workbench/test_wb_serve.py`` holds them equal). Tracing the model a few times instead of
once per grid point keeps a ``wb.serve`` call to seconds. Each shape is called once to compile it
and lay the weights out for TensorE (the relayout a serving engine does at load), and the second
call is timed: on a NeuronCore one launch per iteration (one NEFF); on a GPU each
of the graph's kernels is launched, from a CUDA graph for decode steps (vLLM captures its decode
batch sizes; prefills launch kernel by kernel). A TPU's timing is the compiled whole-graph path
already. ``compiled=False`` times the eager op stream instead.

Tensor parallelism: each device runs :func:`shard_config`'s share (heads, KV heads, MLP and
vocabulary split ``tp`` ways) and every layer adds two all-reduces of the iteration's hidden
states (after attention and after the MLP, as Megatron and vLLM do), priced by
``backend.sim.collectives`` over the target's topology and not overlapped with compute.

The grid: prefill at powers of two up to the token budget (and, with chunked prefill, three
cached lengths), decode at batches of powers of two up to ``max_num_seqs`` and three contexts;
everything in between is bilinear interpolation (linear extrapolation past the edges), which
:meth:`IterationCosts.check` compares with direct simulation at held-out points. An iteration
mixing prefill chunks and decodes costs the prefill of all its tokens (the linear layers see
them together) plus the context-dependent part of the decodes' attention.
"""
from __future__ import annotations

import gc
import logging
import time
from bisect import bisect_right
from contextlib import contextmanager
from functools import lru_cache

import torch

from backend.sim import hardware_kinds
from backend.sim.collectives import collective_cost
from backend.sim.presets import get_target
from backend.sim.serving import Iteration
from workbench.serving.kv_slots import slot_bytes_per_token, slot_cache
from workbench.serving.model_shapes import build_timing_only, model_shape, shard_config

__all__ = ["IterationCosts", "device_of", "tp_topology"]

log = logging.getLogger(__name__)


def device_of(target) -> str:
    """The workbench device that times ``target``: neuron, cuda or tpu."""
    return {"gpu": "cuda", "tpu": "tpu"}.get(get_target(target).kind, "neuron")


def tp_topology(target, tp: int):
    """The interconnect a tensor-parallel group of ``tp`` devices of ``target`` talks over."""
    from backend.sim.topology import get_topology, per_core
    config = get_target(target)
    if config.kind == "tpu":
        from backend.sim.tpu.collectives import slice_topology
        return slice_topology(config, tp)
    if config.kind == "gpu":
        return get_topology(config.name.split("/")[0])
    return per_core(config.name.split("/")[0].split("*")[0], config)


@contextmanager
def _measurement_compiles():
    """How Dynamo compiles the measured forward: every graph a specialisation needs is kept (its
    default limit of 8 recompiles per function would run the rest eagerly), and float attributes
    (a norm's ``eps``) stay constants, as in a static compile, instead of becoming graph inputs
    that add conversion kernels."""
    import torch._dynamo
    unlimited = 1 << 20
    with torch._dynamo.config.patch(recompile_limit=unlimited, accumulated_recompile_limit=unlimited,
                                    specialize_float=True):
        yield


def _powers(low: int, high: int) -> list[int]:
    values, v = [], low
    while v < high:
        values.append(v)
        v *= 2
    return values + [high]


def _axis(xs: list, x: float) -> tuple[int, float]:
    """The grid cell holding ``x`` and its weight (outside the grid: the edge cell, extrapolated)."""
    if len(xs) == 1:
        return 0, 0.0
    i = min(max(bisect_right(xs, x) - 1, 0), len(xs) - 2)
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


def _bilinear(xs, ys, table, x, y) -> float:
    i, u = _axis(xs, x)
    j, v = _axis(ys, y)
    at = lambda a, b: table[min(a, len(xs) - 1)][min(b, len(ys) - 1)]
    return ((1 - u) * (1 - v) * at(i, j) + u * (1 - v) * at(i + 1, j)
            + (1 - u) * v * at(i, j + 1) + u * v * at(i + 1, j + 1))


class IterationCosts:
    """Iteration costs of ``model_or_config`` on ``target`` at tensor parallelism ``tp``;
    callable as the serving simulation's ``cost(iteration) -> seconds``."""

    # torch.compile's ``dynamic``: None, automatic (the first shape compiles static, a changed size
    # recompiles symbolic); False compiles one static graph per shape, the reference the tests
    # hold the symbolic graphs to.
    dynamic = None

    def __init__(self, model_or_config, target: str = "trn2", *, tp: int = 1, max_num_seqs: int = 256,
                 token_budget: int = 2048, max_model_len: int = 8192, chunked_prefill: bool = False,
                 dtype: torch.dtype = torch.bfloat16, compiled: bool = True):
        self.shape = model_shape(model_or_config, dtype)
        self.target, self.tp, self.dtype = get_target(target).name, tp, dtype
        self.device = device_of(target)
        self.compiled = compiled and not hardware_kinds.for_device(self.device).compiled_timing
        self.topology = tp_topology(target, tp) if tp > 1 else None
        self._configs = {k: shard_config(model_or_config, tp, k) for k in sorted({1, min(2, self.shape.num_layers)})}
        self._models: dict = {}       # built while measuring, released after (they hold simulated HBM)
        self.prefill_tokens = _powers(16, max(16, token_budget))
        self.prefill_cached = _powers(max_model_len // 4, max_model_len) if chunked_prefill else [0]
        if chunked_prefill:
            self.prefill_cached = [0] + self.prefill_cached[:2]
        self.decode_batches = _powers(1, max(1, max_num_seqs))
        self.decode_contexts = [16, max(32, max_model_len // 4), max(64, max_model_len)]
        self.measurements: list[dict] = []
        self.measure_s = 0.0
        self._prefill = self._decode = None
        self._simulated: dict = {}
        self._slot_tokens = None

    # --- direct simulation ------------------------------------------------------------------------
    def _model(self, layers: int):
        if layers not in self._models:
            self._models[layers] = build_timing_only(self._configs[layers], self.dtype)
        return self._models[layers]

    def _runner(self, layers: int, static: bool = False):
        """What runs a forward: the model, or its compiled graph (``compiled``); ``static``: one
        static graph per shape whatever ``dynamic`` says."""
        if not self.compiled:
            return self._model(layers)
        key = ("compiled", layers, static)
        if key not in self._models:
            self._models[key] = torch.compile(self._model(layers), backend="neuron",
                                              dynamic=False if static else self.dynamic)
        return self._models[key]

    def release(self) -> None:
        """Drop the measurement models: timing-only tensors hold no host memory but do hold the
        simulated device's, which the next model measured in this session needs."""
        self._models.clear()
        gc.collect()

    def _forward(self, layers: int, batch: int, cached: int, new: int, static: bool = False) -> None:
        """One forward of ``batch`` sequences, ``new`` tokens each over ``cached`` ones."""
        with torch.neuron.timing_only(values_up_to=0):
            cache = slot_cache(self._model(layers).config, batch, cached, new, self.dtype)
            ids = torch.zeros(batch, new, dtype=torch.long, device="neuron")
        self._runner(layers, static)(ids, past_key_values=cache, logits_to_keep=1)

    def _profiled(self, layers: int, batch: int, cached: int, new: int, static: bool = False):
        from workbench.session import ProfileSession
        self._runner(layers, static)        # built outside the profile: its weights' initialisation is not an iteration
        session = ProfileSession(self.device, self.target, source=False, timing_only=True)
        # No tensor keeps values (not even masks and ids): a compiled graph then sees inputs alike.
        with torch.neuron.timing_only(values_up_to=0), session as prof:
            if self.compiled and new == 1 and hasattr(session.sink, "graph_replay"):
                session.sink.graph_replay = True        # a GPU's decode step replays a CUDA graph
            self._forward(layers, batch, cached, new, static)
        return prof

    def _forward_s(self, layers: int, batch: int, cached: int, new: int) -> float:
        try:
            return self._timed(layers, batch, cached, new)
        except AssertionError as error:
            # Dynamo (torch 2.13) can fail to guard a size symbol of a re-trace (seen for a prefill
            # with no cached tokens after decodes of a long context); that shape gets its own static
            # graph, which costs what the symbolic one would (the two are held equal).
            if not self.compiled or "sources must not be empty" not in str(error):
                raise
            log.info("symbolic re-trace failed for %s; compiling this shape static", (layers, batch, cached, new))
            return self._timed(layers, batch, cached, new, static=True)

    def _timed(self, layers: int, batch: int, cached: int, new: int, static: bool = False) -> float:
        with torch.no_grad(), _measurement_compiles():
            if self.compiled:     # compile (or specialise) for this shape; the weight layouts are paid here, once
                self._profiled(layers, batch, cached, new, static)
            return self._profiled(layers, batch, cached, new, static).summary["total_time"]

    def allreduce_s(self, tokens: int) -> float:
        """The tensor-parallel all-reduces of one iteration of ``tokens`` tokens, all layers."""
        if self.tp == 1:
            return 0.0
        nbytes = tokens * self.shape.hidden_size * self.shape.dtype_bytes
        return 2 * self.shape.num_layers * collective_cost("all_reduce", nbytes, self.tp, self.topology).time_ns * 1e-9

    def slot_tokens(self) -> int:
        """The most cached tokens (batch x context) a measurement holds: 70% of what the simulated
        device holding the model's buffers has free, per token one layer's KV and the copy a
        masked prefill chunk makes of it (Hugging Face's ``repeat_kv``, K and V per query head)."""
        if self._slot_tokens is None:
            free = torch.neuron.mem_get_info()[0]
            target = get_target(self.target)
            if target.kind == "neuron":       # the profile runs on this core: its memory bounds the buffers
                free = min(free, target.hbm_bytes - torch.neuron.memory_allocated())
            self._model(1)
            config = self._configs[1]
            copies = 1 + config.num_attention_heads // config.num_key_value_heads
            self._slot_tokens = int(0.7 * free // (copies * slot_bytes_per_token(config, self.dtype)))
        return self._slot_tokens

    def simulate(self, batch: int, cached: int, new: int) -> float:
        """Seconds of one forward of ``batch`` sequences, ``new`` tokens each over ``cached`` ones,
        on every layer of one device, plus the tensor-parallel all-reduces."""
        key = (batch, cached, new)
        if key in self._simulated:
            return self._simulated[key]
        started = time.perf_counter()
        one = self._forward_s(1, batch, cached, new)
        per_layer = self._forward_s(2, batch, cached, new) - one if 2 in self._configs else one
        self.measure_s += time.perf_counter() - started
        seconds = one + (self.shape.num_layers - 1) * per_layer + self.allreduce_s(batch * new)
        self.measurements.append({"batch": batch, "cached": cached, "new_tokens": new, "seconds": seconds})
        self._simulated[key] = seconds
        return seconds

    def prefill_direct(self, tokens: int, cached: int = 0) -> float:
        return self.simulate(1, cached, tokens)

    def decode_direct(self, batch: int, context: int) -> float:
        """A decode step; a batch whose cache would not fit the measurement's buffers adds to the
        step at a short context the context-dependent part of a smaller batch, scaled by the
        batch ratio (attention reads grow with batch x context)."""
        if batch * context <= self.slot_tokens():
            return self.simulate(batch, context - 1, 1)
        short = self.decode_contexts[0]
        fits = 1 << max(0, (self.slot_tokens() // context).bit_length() - 1)
        if fits * context > self.slot_tokens():
            raise ValueError(f"a context of {context} tokens does not fit the measurement's KV buffers on "
                             f"{self.target} ({self.slot_tokens()} tokens)")
        extra = self.simulate(fits, context - 1, 1) - self.simulate(fits, short - 1, 1)
        return self.simulate(batch, short - 1, 1) + batch / fits * extra

    # --- the grid ---------------------------------------------------------------------------------
    def build(self) -> "IterationCosts":
        """Measure the grid (once)."""
        if self._prefill is None:
            self._prefill = [[self.prefill_direct(n, c) for c in self.prefill_cached] for n in self.prefill_tokens]
            self._decode = [[self.decode_direct(b, c) for c in self.decode_contexts] for b in self.decode_batches]
            self.release()
            log.info("measured %d iteration shapes of %s on %s (tp=%d) in %.1f s", len(self.measurements),
                     self.shape.name, self.target, self.tp, self.measure_s)
        return self

    def prefill_s(self, tokens: int, cached: int = 0) -> float:
        self.build()
        return _bilinear(self.prefill_tokens, self.prefill_cached, self._prefill, tokens, cached)

    def decode_s(self, batch: int, context: float) -> float:
        self.build()
        return _bilinear(self.decode_batches, self.decode_contexts, self._decode, batch, context)

    def __call__(self, iteration: Iteration) -> float:
        return self._cost(tuple(iteration.prefill_chunks), tuple(iteration.decode_contexts))

    @lru_cache(maxsize=1 << 16)
    def _cost(self, chunks: tuple, contexts: tuple) -> float:
        b = len(contexts)
        mean_context = sum(contexts) / b if b else 0.0
        if not chunks:
            return self.decode_s(b, mean_context)
        tokens = sum(n for n, _ in chunks)
        cached = sum(n * c for n, c in chunks) / tokens           # token-weighted context of the chunks
        seconds = self.prefill_s(tokens + b, cached)
        if b:     # decode attention over its contexts; the linear layers are in the prefill already
            seconds += max(0.0, self.decode_s(b, mean_context) - self.decode_s(b, self.decode_contexts[0]))
        return seconds

    def held_out(self) -> tuple[list, list]:
        """Points between grid points (geometric middles of the first and last cells): where
        interpolation is least sure."""
        mid = lambda xs, i: round((xs[i] * xs[i + 1]) ** 0.5) if len(xs) > 1 else xs[0]
        n, b, c = self.prefill_tokens, self.decode_batches, self.decode_contexts
        prefill = sorted({(mid(n, 0), 0), (mid(n, len(n) - 2), 0)})
        decode = sorted({(mid(b, 0), mid(c, 0)), (mid(b, len(b) - 2), mid(c, len(c) - 2))})
        return prefill, decode

    def check(self, prefill=None, decode=None) -> list[dict]:
        """Interpolated vs directly simulated cost at held-out points (default :meth:`held_out`):
        one row each, with the error."""
        default_prefill, default_decode = self.held_out()
        rows = []
        for kind, points, fast, direct in (("prefill", prefill or default_prefill, self.prefill_s, self.prefill_direct),
                                           ("decode", decode or default_decode, self.decode_s, self.decode_direct)):
            for a, b in points:
                predicted, simulated = fast(a, b), direct(a, b)
                rows.append({"kind": kind, "size": a, "context": b, "interpolated_s": predicted,
                             "simulated_s": simulated, "error_percent": 100 * (predicted / simulated - 1)})
        self.release()
        return rows
