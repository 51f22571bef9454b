"""Llama configurations by name, with the field names and values of each model's Hugging Face
``config.json`` (huggingface.co/meta-llama/<model>/blob/main/config.json).

A :class:`LlamaConfig` holds what the computation depends on and nothing else (no tokenizer
ids, no context-length limits); :meth:`LlamaConfig.to_hf` and :meth:`LlamaConfig.from_hf`
convert to and from ``transformers.LlamaConfig``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["LlamaConfig", "Llama3RopeScaling", "LLAMA_CONFIGS", "llama_config"]


@dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1's ``rope_scaling`` ("rope_type": "llama3"): low frequencies divided by ``factor``,
    a smooth blend between ``low_freq_factor`` and ``high_freq_factor`` wavelengths."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class LlamaConfig:
    """The shape of a Llama model (Hugging Face's names). ``head_dim`` 0 means
    ``hidden_size // num_attention_heads``, as in ``transformers``."""

    name: str = "llama"
    vocab_size: int = 128256
    hidden_size: int = 4096
    intermediate_size: int = 14336
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 0
    rope_theta: float = 500000.0
    rope_scaling: Llama3RopeScaling | None = None
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_key_value_heads})")
        if not self.head_dim:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                                 f"({self.num_attention_heads}); give head_dim")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)

    def replace(self, **changes) -> LlamaConfig:
        """A copy with ``changes`` (e.g. ``num_hidden_layers=2``); a derived ``head_dim`` follows
        the new widths unless given."""
        if "head_dim" not in changes and self.head_dim == self.hidden_size // self.num_attention_heads:
            changes["head_dim"] = 0
        return replace(self, **changes)

    @property
    def num_parameters(self) -> int:
        """Parameters of the model (a tied LM head counted once)."""
        d, hd = self.hidden_size, self.head_dim
        attention = d * hd * (2 * self.num_attention_heads + 2 * self.num_key_value_heads)
        layer = attention + 3 * d * self.intermediate_size + 2 * d
        head = 0 if self.tie_word_embeddings else self.vocab_size * d
        return self.vocab_size * d + self.num_hidden_layers * layer + d + head

    def to_hf(self):
        """This configuration as a ``transformers.LlamaConfig``."""
        from transformers import LlamaConfig as HFLlamaConfig

        rope = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.rope_scaling is not None:
            s = self.rope_scaling
            rope = {"rope_type": "llama3", "rope_theta": self.rope_theta, "factor": s.factor,
                    "low_freq_factor": s.low_freq_factor, "high_freq_factor": s.high_freq_factor,
                    "original_max_position_embeddings": s.original_max_position_embeddings}
        return HFLlamaConfig(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                             intermediate_size=self.intermediate_size, num_hidden_layers=self.num_hidden_layers,
                             num_attention_heads=self.num_attention_heads,
                             num_key_value_heads=self.num_key_value_heads, head_dim=self.head_dim,
                             rms_norm_eps=self.rms_norm_eps, tie_word_embeddings=self.tie_word_embeddings,
                             rope_parameters=rope, name_or_path=self.name)

    @classmethod
    def from_hf(cls, config) -> LlamaConfig:
        """The shape of a ``transformers.LlamaConfig`` (or a model holding one)."""
        config = getattr(config, "config", config)
        rope = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
        theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ("default", "llama3"):
            raise NotImplementedError(f"rope_type {kind!r}: only 'default' and 'llama3' are implemented")
        scaling = None if kind == "default" else Llama3RopeScaling(
            rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"], rope["original_max_position_embeddings"])
        heads = config.num_attention_heads
        return cls(getattr(config, "name_or_path", "") or "llama", config.vocab_size, config.hidden_size,
                   config.intermediate_size, config.num_hidden_layers, heads,
                   getattr(config, "num_key_value_heads", None) or heads,
                   getattr(config, "head_dim", None) or config.hidden_size // heads, theta, scaling,
                   config.rms_norm_eps, bool(getattr(config, "tie_word_embeddings", False)))


_LLAMA3_8B = LlamaConfig("Llama-3-8B")
_LLAMA3_70B = LlamaConfig("Llama-3-70B", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                          num_attention_heads=64)
_LLAMA2_7B = LlamaConfig("Llama-2-7B", vocab_size=32000, intermediate_size=11008, num_key_value_heads=32,
                         rope_theta=10000.0)
# The models' config.json values (rope_theta, rope_scaling, rms_norm_eps and tie_word_embeddings as
# published; Llama-2's rms_norm_eps is 1e-5 in the -hf configs).
LLAMA_CONFIGS: dict[str, LlamaConfig] = {c.name: c for c in (
    LlamaConfig("Llama-3.2-1B", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                rope_scaling=Llama3RopeScaling(factor=32.0), tie_word_embeddings=True),
    _LLAMA3_8B,
    _LLAMA3_8B.replace(name="Llama-3.1-8B", rope_scaling=Llama3RopeScaling()),
    _LLAMA3_70B,
    _LLAMA3_70B.replace(name="Llama-3.1-70B", rope_scaling=Llama3RopeScaling()),
    _LLAMA3_70B.replace(name="Llama-3.3-70B", rope_scaling=Llama3RopeScaling()),
    _LLAMA2_7B,
    _LLAMA2_7B.replace(name="Llama-2-70B", hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                       num_attention_heads=64, num_key_value_heads=8),
)}


def llama_config(name: str, **changes) -> LlamaConfig:
    """The named configuration (``LLAMA_CONFIGS``), with ``changes`` (e.g. ``num_hidden_layers=2``)."""
    try:
        config = LLAMA_CONFIGS[name]
    except KeyError:
        raise KeyError(f"unknown Llama configuration {name!r}; known: {', '.join(LLAMA_CONFIGS)}") from None
    return config.replace(**changes) if changes else config
