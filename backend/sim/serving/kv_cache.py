"""The paged KV cache: how many blocks fit on a device, and who holds them.

As vLLM's block manager: the cache is ``num_gpu_blocks`` blocks of ``block_size`` token slots;
a sequence of ``n`` tokens holds ``ceil(n / block_size)`` blocks. Admitting a waiting sequence
must leave ``watermark * num_gpu_blocks`` blocks free (so that running sequences can still grow
without preempting at once); growing a running sequence may use every block.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["kv_bytes_per_token", "num_kv_blocks", "BlockManager", "blocks_for"]


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int = 2, tp: int = 1) -> int:
    """Bytes of keys and values one token keeps on one of ``tp`` tensor-parallel devices (the KV
    heads are split across them; a KV head is replicated when there are fewer heads than devices)."""
    heads_here = max(1, -(-num_kv_heads // tp))
    return 2 * num_layers * heads_here * head_dim * dtype_bytes


def num_kv_blocks(memory_bytes: float, weight_bytes: float, activation_bytes: float, bytes_per_token: int,
                  block_size: int = 16, gpu_memory_utilization: float = 0.9) -> int:
    """Blocks that fit, as vLLM sizes its cache: ``memory x gpu_memory_utilization`` minus the
    weights and the peak activations of the largest batch, divided by the bytes of one block."""
    free = memory_bytes * gpu_memory_utilization - weight_bytes - activation_bytes
    if free <= 0:
        raise ValueError(f"no memory left for the KV cache: {memory_bytes * gpu_memory_utilization / 2**30:.2f} GiB "
                         f"usable, weights {weight_bytes / 2**30:.2f} GiB, activations "
                         f"{activation_bytes / 2**30:.2f} GiB; use more tensor parallelism or a larger device")
    return int(free // (block_size * bytes_per_token))


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


@dataclass
class BlockManager:
    """Free-block accounting of one replica's KV cache."""

    num_blocks: int
    block_size: int = 16
    watermark: float = 0.01

    def __post_init__(self) -> None:
        if self.num_blocks < 1 or self.block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {self.num_blocks} and {self.block_size}")
        self.free = self.num_blocks
        self.watermark_blocks = int(self.watermark * self.num_blocks)

    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    def fits_ever(self, blocks: int) -> bool:
        """Whether a sequence needing ``blocks`` could be admitted into an empty cache."""
        return self.num_blocks - blocks >= self.watermark_blocks

    def can_admit(self, blocks: int) -> bool:
        return self.free - blocks >= self.watermark_blocks

    def take(self, blocks: int) -> None:
        if blocks > self.free:
            raise RuntimeError(f"taking {blocks} KV blocks with {self.free} free")
        self.free -= blocks

    def give(self, blocks: int) -> None:
        self.free += blocks
        if self.free > self.num_blocks:
            raise RuntimeError("more KV blocks freed than allocated")
