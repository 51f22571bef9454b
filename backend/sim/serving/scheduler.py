"""vLLM-style schedulers: continuous batching over a paged KV cache, with or without chunked prefill.

Names and defaults follow vLLM's ``SchedulerConfig`` / ``CacheConfig`` (the v0 scheduler):

- ``enable_chunked_prefill=False`` (vLLM's default scheduler): an iteration runs either prefills
  of waiting requests, admitted first-come first-served while the token budget
  ``max_num_batched_tokens``, the sequence cap ``max_num_seqs`` and the KV cache (above the
  watermark) allow, or, when none was admitted, one decode step of every running sequence.
- ``enable_chunked_prefill=True`` (Sarathi-Serve's stall-free batching): every iteration spends
  the token budget on the running decodes first, then on prefill chunks of partly prefilled
  sequences, then of waiting requests, cutting the last chunk to the budget left.

A decode that needs a new KV block when none is free preempts the most recently admitted
running sequence by recompute (vLLM's default): its blocks are freed and it goes back to the
front of the waiting queue, to prefill its prompt and the tokens it generated so far again.
A sequence that could not fit into an empty cache is rejected, as vLLM ignores such prompts.

Encoder-decoder requests (``Request.encoder_tokens > 0``, e.g. Whisper's 1,500 frames per 30 s
window) run their encoder in the iteration that admits them, with their decoder prompt; the
cross-attention keys and values of the encoder outputs are computed then and held in blocks of
the same pool until the request finishes (vLLM's cross-attention block table), so admitting one
needs ``blocks(prompt) + blocks(encoder_tokens)`` blocks. ``max_num_encoder_input_tokens``
caps the encoder tokens an iteration admits (vLLM's encoder budget: the token budget by default,
and at least one request). A preempted one recomputes its encoder too. Chunked prefill is not
supported for encoder-decoder models, as in vLLM.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from backend.sim.serving.kv_cache import BlockManager, blocks_for
from backend.sim.serving.requests import Request

__all__ = ["SchedulerConfig", "Sequence", "Iteration", "Scheduler"]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """vLLM's scheduling knobs (same names and defaults; ``max_num_batched_tokens=None`` takes
    vLLM's default: 2048 with chunked prefill, else ``max(max_model_len, 2048)``)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool = False
    block_size: int = 16
    watermark: float = 0.01
    max_model_len: int = 8192
    max_num_encoder_input_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.block_size < 1 or self.max_model_len < 1:
            raise ValueError("max_num_seqs, block_size and max_model_len must be >= 1")
        if not 0 <= self.watermark < 1:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark}")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")
        if self.max_num_encoder_input_tokens is not None and self.max_num_encoder_input_tokens < 1:
            raise ValueError(f"max_num_encoder_input_tokens must be >= 1, got {self.max_num_encoder_input_tokens}")

    @property
    def token_budget(self) -> int:
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        return 2048 if self.enable_chunked_prefill else max(self.max_model_len, 2048)

    @property
    def encoder_budget(self) -> int:
        """Encoder tokens one iteration may admit (past the first request's)."""
        return self.max_num_encoder_input_tokens or self.token_budget

    @classmethod
    def named(cls, name: str, **changes) -> "SchedulerConfig":
        """``"vllm"`` (continuous batching) or ``"sarathi"`` (chunked prefill), with changes."""
        presets = {"vllm": {}, "continuous": {}, "sarathi": {"enable_chunked_prefill": True},
                   "chunked": {"enable_chunked_prefill": True}}
        if name not in presets:
            raise ValueError(f"unknown scheduler {name!r}; known: {', '.join(presets)}")
        return cls(**{**presets[name], **changes})


@dataclass(eq=False)
class Sequence:
    """A request in flight: tokens known, tokens whose KV is cached, blocks held, token times."""

    request: Request
    generated: int = 0
    computed: int = 0
    prefilled: bool = False       # the prompt (after a preemption: and the tokens so far) is cached
    blocks: int = 0
    preemptions: int = 0
    first_scheduled_s: float | None = None
    token_times_s: list = field(default_factory=list)
    finished_s: float | None = None
    rejected: str = ""

    @property
    def tokens(self) -> int:
        """Prompt and generated tokens: what a (re)computed prefill covers."""
        return self.request.prompt_tokens + self.generated

    @property
    def uncomputed(self) -> int:
        return self.tokens - self.computed

    def blocks_needed(self, tokens: int, block_size: int) -> int:
        """Blocks for ``tokens`` decoder tokens and the encoder outputs' cross-attention K/V."""
        return blocks_for(tokens, block_size) + blocks_for(self.request.encoder_tokens, block_size)

    @property
    def is_prefill(self) -> bool:
        return not self.prefilled


@dataclass(frozen=True, slots=True)
class Iteration:
    """What one forward pass runs: prefill chunks ``(new_tokens, cached_tokens)``, the context
    length (cached tokens plus the new one) of each decoding sequence, and the encoder length of
    each sequence whose encoder runs in it (encoder-decoder models)."""

    prefill_chunks: tuple = ()
    decode_contexts: tuple = ()
    encoder_inputs: tuple = ()

    @property
    def prefill_tokens(self) -> int:
        return sum(n for n, _ in self.prefill_chunks)

    @property
    def decode_batch(self) -> int:
        return len(self.decode_contexts)

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.decode_batch

    @property
    def context_lengths(self) -> tuple:
        """Every sequence's context after the iteration (prefills first)."""
        return tuple(n + c for n, c in self.prefill_chunks) + self.decode_contexts

    def __bool__(self) -> bool:
        return bool(self.prefill_chunks or self.decode_contexts)


class Scheduler:
    """One replica's queues and KV cache; :meth:`schedule` picks the next iteration's work."""

    def __init__(self, config: SchedulerConfig, num_gpu_blocks: int):
        self.config = config
        self.kv = BlockManager(num_gpu_blocks, config.block_size, config.watermark)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.rejected: list[Sequence] = []
        self.preemptions = 0          # preemptions so far, all sequences

    def add(self, seq: Sequence) -> None:
        if seq.request.encoder_tokens and self.config.enable_chunked_prefill:
            raise ValueError(f"request {seq.request.request_id} has an encoder; chunked prefill is not supported "
                             "for encoder-decoder models (as in vLLM): use the 'vllm' scheduler")
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # --- KV blocks ----------------------------------------------------------------------------------
    def _grow(self, seq: Sequence, tokens: int) -> bool:
        """Give ``seq`` blocks for ``tokens`` cached tokens; False when the cache is full."""
        need = seq.blocks_needed(tokens, self.config.block_size) - seq.blocks
        if need > self.kv.free:
            return False
        if need > 0:
            self.kv.take(need)
            seq.blocks += need
        return True

    def release(self, seq: Sequence) -> None:
        self.kv.give(seq.blocks)
        seq.blocks = 0

    def _preempt(self, seq: Sequence) -> None:
        """Preemption by recompute: drop the sequence's cache, requeue it at the front."""
        self.release(seq)
        seq.computed = 0
        seq.prefilled = False
        seq.preemptions += 1
        self.preemptions += 1
        self.running.remove(seq)
        self.waiting.appendleft(seq)

    # --- scheduling -----------------------------------------------------------------------------------
    def schedule(self, now_s: float) -> tuple[Iteration, list[tuple[Sequence, int]]]:
        """The next iteration and the ``(sequence, new tokens)`` it runs."""
        budget = [self.config.token_budget]
        work: list[tuple[Sequence, int]] = []
        if self.config.enable_chunked_prefill:
            self._schedule_decodes(work, budget)
            self._schedule_running_prefills(work, budget)
            self._schedule_waiting(work, budget, now_s, chunked=True)
        else:
            self._schedule_waiting(work, budget, now_s, chunked=False)
            if not work:
                self._schedule_decodes(work, budget)
        prefills = tuple((n, s.computed) for s, n in work if s.is_prefill)
        decodes = tuple(s.computed + 1 for s, n in work if not s.is_prefill)
        encoders = tuple(s.request.encoder_tokens for s, n in work
                         if s.is_prefill and s.computed == 0 and s.request.encoder_tokens)
        return Iteration(prefills, decodes, encoders), work

    def _schedule_decodes(self, work, budget) -> None:
        for seq in [s for s in self.running if not s.is_prefill]:
            if seq not in self.running:          # preempted as a victim of an earlier sequence
                continue
            if budget[0] < 1:
                break
            while not self._grow(seq, seq.tokens):
                victim = self.running[-1]
                self._preempt(victim)
                budget[0] += sum(n for s, n in work if s is victim)
                work[:] = [(s, n) for s, n in work if s is not victim]
                if victim is seq:
                    break
            else:
                work.append((seq, 1))
                budget[0] -= 1

    def _schedule_running_prefills(self, work, budget) -> None:
        for seq in [s for s in self.running if s.is_prefill]:
            if budget[0] < 1:
                break
            n = min(seq.uncomputed, budget[0])
            work.append((seq, n))
            budget[0] -= n

    def _schedule_waiting(self, work, budget, now_s: float, *, chunked: bool) -> None:
        cfg = self.config
        encoder_budget, admitted = cfg.encoder_budget, 0
        while self.waiting and budget[0] > 0 and len(self.running) < cfg.max_num_seqs:
            seq = self.waiting[0]
            need = seq.blocks_needed(seq.tokens, cfg.block_size)
            limit = cfg.max_model_len if chunked else min(cfg.max_model_len, cfg.token_budget)
            if seq.tokens > limit or not self.kv.fits_ever(need):
                seq.rejected = (f"{seq.tokens} tokens exceed the limit of {limit}" if seq.tokens > limit else
                                f"{need} KV blocks never fit in {self.kv.num_blocks} (watermark "
                                f"{self.kv.watermark_blocks})")
                self.rejected.append(self.waiting.popleft())
                continue
            n = min(seq.uncomputed, budget[0]) if chunked else seq.uncomputed
            encoder = seq.request.encoder_tokens
            if n > budget[0] or not self.kv.can_admit(need) or (admitted and encoder > encoder_budget):
                break
            encoder_budget -= encoder
            admitted += 1
            self.waiting.popleft()
            self.kv.take(need)
            seq.blocks = need
            if seq.first_scheduled_s is None:
                seq.first_scheduled_s = now_s
            self.running.append(seq)
            work.append((seq, n))
            budget[0] -= n
