"""Iteration costs of a Whisper-style encoder-decoder, measured by running the real model timing-only.

A speech request runs, in the iteration that admits it, the encoder over its 30 s window (1,500
frames after the convolutional stem) and the decoder over its prompt, which computes the
cross-attention keys and values of the encoder outputs once (Hugging Face's
``EncoderDecoderCache`` then marks them updated); every later iteration decodes one token per
sequence with self-attention over its tokens and cross-attention over the cached frames. Each
of the three is timed by running that part of ``WhisperForConditionalGeneration`` (built from
its config, data-free) under ``wb.profile(device=..., target=..., timing_only=True)``:

- encoder: ``model.model.encoder(features)`` for ``w`` windows of log-mel features;
- admission: the decoder over ``k`` prompts of ``n`` tokens with an empty cross-attention cache;
- decode: the decoder over one token for ``b`` sequences at self-attention context ``c``, the
  cross-attention cache full.

The LM head runs on the last position only, as serving does. Layers extrapolate from one- and
two-layer builds as for causal LMs (``T(L) = T(1) + (L - 1)(T(2) - T(1))``, encoder and decoder
each); tensor parallelism splits heads, FFN width and vocabulary ``tp`` ways and adds two
all-reduces per encoder layer and three per decoder layer (self-attention, cross-attention,
MLP) of the pass's hidden states. Grids (windows and prompts admitted in one pass in powers of
two up to the encoder budget's windows, at most 8, and linear past them: an encoder window is
1,500 tokens, compute-bound and linear in windows from one on; decode batches in powers of two
up to ``max_num_seqs``) are bilinearly interpolated, and :meth:`check` compares
with direct simulation at held-out points.
"""
from __future__ import annotations

import copy
import gc
import logging
import time
import types
from functools import lru_cache

import torch

from backend.sim.collectives import collective_cost
from backend.sim.presets import get_target
from backend.sim.serving import Iteration
from workbench.serving.iteration_costs import _bilinear, _powers, device_of, tp_topology
from workbench.serving.kv_slots import slot_cache
from workbench.serving.model_shapes import ModelShape

__all__ = ["EncoderDecoderCosts", "is_encoder_decoder", "speech_shape", "shard_speech_config", "build_speech_model",
           "ENCODER_FRAMES_PER_AUDIO_S"]

log = logging.getLogger(__name__)

# Whisper's features: 100 log-mel frames per second (hop 160 at 16 kHz); the encoder's stride-2
# convolution halves them, so 1,500 encoder outputs hold a 30 s window.
ENCODER_FRAMES_PER_AUDIO_S = 50
_MEASURED_WINDOWS = 8       # encoder windows and admitted prompts measured directly; linear past them


def is_encoder_decoder(config) -> bool:
    return bool(getattr(config, "is_encoder_decoder", False)) and hasattr(config, "max_source_positions")


def _params(config) -> int:
    from transformers import AutoModelForSpeechSeq2Seq
    with torch.device("meta"):
        return sum(p.numel() for p in AutoModelForSpeechSeq2Seq.from_config(config).parameters())


def speech_shape(config, dtype: torch.dtype = torch.bfloat16) -> ModelShape:
    """The decoder's sizes (what the KV cache holds, self- and cross-attention alike) and the
    whole model's parameter count."""
    heads = config.decoder_attention_heads
    return ModelShape(getattr(config, "name_or_path", "") or config.model_type, config.decoder_layers,
                      config.d_model, heads, heads, config.d_model // heads, config.decoder_ffn_dim,
                      config.vocab_size, _params(config), torch.tensor([], dtype=dtype).element_size())


def shard_speech_config(config, tp: int, num_layers: int | None = None):
    """One device's share under tensor parallelism ``tp``, as far as a config says it: FFN widths
    and vocabulary split (``d_model`` whole), ``num_layers`` encoder and decoder layers when given.
    The attention heads stay: Whisper derives its head size from ``d_model / heads``, so
    :func:`build_speech_model` gives each attention ``heads / tp`` heads of the full size."""
    config = copy.deepcopy(config)
    sizes = (config.encoder_attention_heads, config.decoder_attention_heads, config.encoder_ffn_dim,
             config.decoder_ffn_dim)
    if tp < 1 or any(s % tp for s in sizes):
        raise ValueError(f"tp={tp} must divide the attention heads ({sizes[0]}, {sizes[1]}) and FFN widths "
                         f"({sizes[2]}, {sizes[3]})")
    config.encoder_ffn_dim //= tp
    config.decoder_ffn_dim //= tp
    config.vocab_size = -(-config.vocab_size // tp)
    if config.pad_token_id is not None and config.pad_token_id >= config.vocab_size:
        config.pad_token_id = None       # the padding row lives on another device's share of the table
    if num_layers is not None:
        config.encoder_layers = config.decoder_layers = num_layers
    return config


def _shard_attention(attention, tp: int) -> None:
    """``heads / tp`` heads of the full head size: column-parallel q/k/v, row-parallel output."""
    from torch import nn
    attention.num_heads //= tp
    width, d_model = attention.num_heads * attention.head_dim, attention.embed_dim
    for name in ("q_proj", "k_proj", "v_proj"):
        old = getattr(attention, name)
        setattr(attention, name, nn.Linear(d_model, width, bias=old.bias is not None))
    attention.out_proj = nn.Linear(width, d_model, bias=attention.out_proj.bias is not None)


def build_speech_model(config, tp: int = 1, dtype: torch.dtype = torch.bfloat16):
    """One device's share of ``config`` (from :func:`shard_speech_config`) on ``neuron``, timing-only."""
    from transformers import AutoModelForSpeechSeq2Seq
    from transformers.models.whisper.modeling_whisper import WhisperAttention
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("neuron"), torch.neuron.timing_only(values_up_to=0):
            model = AutoModelForSpeechSeq2Seq.from_config(config, attn_implementation="sdpa").eval()
            if tp > 1:
                for module in list(model.modules()):
                    if isinstance(module, WhisperAttention):
                        _shard_attention(module, tp)
    finally:
        torch.set_default_dtype(previous)
    return model


class EncoderDecoderCosts:
    """Iteration costs of a Whisper-style ``config`` on ``target`` at tensor parallelism ``tp``;
    callable as the serving simulation's ``cost(iteration) -> seconds``."""

    def __init__(self, config, target: str = "trn2", *, tp: int = 1, max_num_seqs: int = 256,
                 max_model_len: int = 448, encoder_budget: int | None = None, dtype: torch.dtype = torch.bfloat16):
        self.config, self.shape = config, speech_shape(config, dtype)
        self.target, self.tp, self.dtype = get_target(target).name, tp, dtype
        self.device = device_of(target)
        self.topology = tp_topology(target, tp) if tp > 1 else None
        self.encoder_tokens = config.max_source_positions
        self.window_s = self.encoder_tokens / ENCODER_FRAMES_PER_AUDIO_S
        self._configs = {k: shard_speech_config(config, tp, k) for k in (1, 2)}
        self._models: dict = {}
        per_pass = max(1, (encoder_budget or 0) // self.encoder_tokens) if encoder_budget else _MEASURED_WINDOWS
        self.encoder_windows = _powers(1, min(_MEASURED_WINDOWS, per_pass, max_num_seqs))
        self.admit_batches = list(self.encoder_windows)
        self.admit_prompts = [4, 32]
        self.decode_batches = _powers(1, max(1, max_num_seqs))
        self.decode_contexts = [16, max(32, max_model_len // 4), max(64, max_model_len)]
        self.measurements: list[dict] = []
        self.measure_s = 0.0
        self._grids = None
        self._simulated: dict = {}

    # --- direct simulation ------------------------------------------------------------------------
    def _model(self, layers: int):
        if layers not in self._models:
            self._models[layers] = build_speech_model(self._configs[layers], self.tp, self.dtype)
        return self._models[layers]

    def release(self) -> None:
        self._models.clear()
        gc.collect()

    def _profile(self, fn):
        import workbench as wb
        with torch.no_grad(), torch.neuron.timing_only(values_up_to=0), wb.profile(device=self.device, target=self.target, timing_only=True,
                                         source=False) as prof:
            fn()
        return prof

    def _heads(self, layers: int):
        c = self._configs[layers]
        return types.SimpleNamespace(num_key_value_heads=c.decoder_attention_heads // self.tp,
                                     head_dim=self.shape.head_dim, num_hidden_layers=c.decoder_layers)

    def encoder_profile(self, layers: int, windows: int):
        model, c = self._model(layers), self._configs[layers]
        with torch.neuron.timing_only(values_up_to=0):
            features = torch.empty(windows, c.num_mel_bins, 2 * self.encoder_tokens, dtype=self.dtype,
                                   device="neuron")
        return self._profile(lambda: model.model.encoder(features))

    def decoder_profile(self, layers: int, batch: int, cached: int, new: int):
        """The decoder over ``new`` tokens of ``batch`` sequences holding ``cached`` ones; with
        ``cached == 0`` the pass also computes the cross-attention K/V (admission)."""
        from transformers.cache_utils import EncoderDecoderCache
        model, heads = self._model(layers), self._heads(layers)
        with torch.neuron.timing_only(values_up_to=0):
            frames = torch.empty(batch, self.encoder_tokens, self.config.d_model, dtype=self.dtype, device="neuron")
            ids = torch.zeros(batch, new, dtype=torch.long, device="neuron")
            admitting = cached == 0
            cross = slot_cache(heads, batch, 0 if admitting else self.encoder_tokens,
                               self.encoder_tokens if admitting else 0, self.dtype)
            cache = EncoderDecoderCache(slot_cache(heads, batch, cached, new, self.dtype), cross)
            if not admitting:
                cache.is_updated = {i: True for i in range(heads.num_hidden_layers)}

        def run():
            hidden = model.model.decoder(input_ids=ids, encoder_hidden_states=frames, cache=cache,
                                         use_cache=True).last_hidden_state
            model.proj_out(hidden[:, -1:])
        return self._profile(run)

    def _allreduce_s(self, tokens: int, per_layer: int, layers: int) -> float:
        if self.tp == 1:
            return 0.0
        nbytes = tokens * self.config.d_model * self.shape.dtype_bytes
        return per_layer * layers * collective_cost("all_reduce", nbytes, self.tp, self.topology).time_ns * 1e-9

    def _measured(self, key: tuple, profile, layers: int, allreduce_s: float) -> float:
        if key not in self._simulated:
            started = time.perf_counter()
            one = profile(1).summary["total_time"]
            per_layer = profile(2).summary["total_time"] - one
            self.measure_s += time.perf_counter() - started
            seconds = one + (layers - 1) * per_layer + allreduce_s
            self.measurements.append({"part": key[0], "size": key[1], "context": key[2], "seconds": seconds})
            self._simulated[key] = seconds
        return self._simulated[key]

    def communication_s(self, windows: int, prompt_tokens: int, decode_batch: int) -> float:
        """The tensor-parallel all-reduces of a pass running ``windows`` encoder windows, admitting
        ``prompt_tokens`` decoder tokens and decoding ``decode_batch`` sequences (0 at tp = 1)."""
        dec = self.config.decoder_layers
        return (self._allreduce_s(windows * self.encoder_tokens, 2, self.config.encoder_layers)
                + self._allreduce_s(prompt_tokens, 3, dec) + self._allreduce_s(decode_batch, 3, dec))

    def encoder_direct(self, windows: int, _unused: int = 0) -> float:
        return self._measured(("encoder", windows, 0), lambda k: self.encoder_profile(k, windows),
                              self.config.encoder_layers,
                              self._allreduce_s(windows * self.encoder_tokens, 2, self.config.encoder_layers))

    def admit_direct(self, batch: int, prompt: int) -> float:
        return self._measured(("admit", batch, prompt), lambda k: self.decoder_profile(k, batch, 0, prompt),
                              self.config.decoder_layers, self._allreduce_s(batch * prompt, 3, self.config.decoder_layers))

    def decode_direct(self, batch: int, context: int) -> float:
        return self._measured(("decode", batch, context), lambda k: self.decoder_profile(k, batch, context - 1, 1),
                              self.config.decoder_layers, self._allreduce_s(batch, 3, self.config.decoder_layers))

    # --- the grids --------------------------------------------------------------------------------
    def build(self) -> "EncoderDecoderCosts":
        if self._grids is None:
            self._grids = {
                "encoder": [[self.encoder_direct(w)] for w in self.encoder_windows],
                "admit": [[self.admit_direct(k, n) for n in self.admit_prompts] for k in self.admit_batches],
                "decode": [[self.decode_direct(b, c) for c in self.decode_contexts] for b in self.decode_batches]}
            self.release()
            log.info("measured %d iteration shapes of %s on %s (tp=%d) in %.1f s", len(self.measurements),
                     self.shape.name, self.target, self.tp, self.measure_s)
        return self

    def encoder_s(self, windows: int) -> float:
        """The encoder over ``windows`` windows (0: none)."""
        if windows <= 0:
            return 0.0
        self.build()
        return _bilinear(self.encoder_windows, [0], self._grids["encoder"], windows, 0)

    def admit_s(self, batch: int, prompt: float) -> float:
        self.build()
        return _bilinear(self.admit_batches, self.admit_prompts, self._grids["admit"], batch, prompt)

    def decode_s(self, batch: int, context: float) -> float:
        self.build()
        return _bilinear(self.decode_batches, self.decode_contexts, self._grids["decode"], batch, context)

    def __call__(self, iteration: Iteration) -> float:
        return self._cost(tuple(iteration.prefill_chunks), tuple(iteration.decode_contexts),
                          len(iteration.encoder_inputs))

    @lru_cache(maxsize=1 << 16)
    def _cost(self, chunks: tuple, contexts: tuple, windows: int) -> float:
        seconds = self.encoder_s(windows)
        if chunks:
            seconds += self.admit_s(len(chunks), sum(n for n, _ in chunks) / len(chunks))
        if contexts:
            seconds += self.decode_s(len(contexts), sum(contexts) / len(contexts))
        return seconds

    def held_out(self) -> list[tuple]:
        mid = lambda xs, i: round((xs[i] * xs[i + 1]) ** 0.5)
        w, b, c = self.encoder_windows, self.decode_batches, self.decode_contexts
        if len(w) < 2 or len(self.admit_batches) < 2:
            return [("decode", b[-1], c[-1])]
        points = [("encoder", mid(w, len(w) - 2), 0), ("admit", mid(self.admit_batches, len(self.admit_batches) - 2), 4)]
        if len(b) > 1:
            points += [("decode", mid(b, 0), mid(c, 0)), ("decode", mid(b, len(b) - 2), mid(c, len(c) - 2))]
        return points

    def check(self, points=None) -> list[dict]:
        """Interpolated vs directly simulated cost at held-out points: one row each, with the error."""
        parts = {"encoder": (lambda a, b: self.encoder_s(a), self.encoder_direct),
                 "admit": (self.admit_s, self.admit_direct), "decode": (self.decode_s, self.decode_direct)}
        rows = []
        for kind, a, b in points or self.held_out():
            fast, direct = parts[kind]
            predicted, simulated = fast(a, b), direct(a, b)
            rows.append({"kind": kind, "size": a, "context": b, "interpolated_s": predicted,
                         "simulated_s": simulated, "error_percent": 100 * (predicted / simulated - 1)})
        self.release()
        return rows
