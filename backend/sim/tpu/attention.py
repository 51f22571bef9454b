"""Scaled-dot-product attention on a TPU as the splash-attention Pallas kernel runs it.

XLA on TPU runs attention as splash attention (``jax/experimental/pallas/ops/tpu/splash_attention/
splash_attention_kernel.py`` in github.com/jax-ml/jax; MaxText's ``attention: flash``). The kernel
walks a grid of ``block_q x block_kv`` score blocks per query head, so its cost differs from the
GEMM-equivalent count the other targets use in three ways, all modelled exactly here:

- causal block skipping: a block whose every score is masked is never run, every other block
  is run whole. With top-left causal alignment (key j visible to query i when j <= i) query block
  ``b`` runs ``ceil(min((b + 1) * block_q, seq_q) / block_kv)`` key blocks; the blocks on the
  diagonal are run in full and masked (one ``where`` per score);
- each block's products are separate MXU passes with their own padding: ``Q @ K^T`` contracts
  over head_dim, which pads to the MXU size (128 -> 256 on v6e wastes half the array; the scaling
  book: "padded to at least size 128 (256 on TPU v6) in all dimensions", github.com/jax-ml/
  scaling-book tpus.md). The forward runs QK^T and PV; the backward recomputes QK^T and dP = dO V^T
  in every kernel it runs, then forms dV, dK (dkv kernel) and dQ (dq kernel) -- one fused kernel
  (MaxText ``sa_use_fused_bwd_kernel``) or the two separate ones, each on its own block grid;
- the online softmax runs on the VPU once per run score: forward ``max``, ``qk - m``, ``exp``,
  the row ``sum``; backward ``p = exp(qk - lse)`` and ``ds = p * (dp - di)``. Its FLOPs use the
  elementwise table every target shares (``exp`` = 4), at the chip's VPU rate; they do not shrink
  when the MXU gets faster.

The MXU and VPU parts add up, as every fusion's do in ``cost.py``, less the share of the softmax
the preset's ``attention_softmax_exposed`` (an ASSUMPTION) lets hide under the MXU time.
"""
from __future__ import annotations

from collections.abc import Callable
from math import ceil, prod

from backend.sim.descriptors import OpRecord
from backend.sim.flops import ELEMENTWISE_FLOPS_PER_ELEMENT
from backend.sim.gpu.tiling import GemmShape

__all__ = ["is_attention", "score_blocks", "SOFTMAX_FORWARD", "SOFTMAX_BACKWARD", "MASK_OP",
           "softmax_flops_per_score", "attention_passes", "attention_work"]

# VPU ops per run score (splash_attention_kernel.py: flash_attention_kernel and the dkv/dq kernels).
SOFTMAX_FORWARD = ("maximum", "sub", "exp", "add")       # row max, qk - m, exp, row sum
SOFTMAX_BACKWARD = ("sub", "exp", "sub", "mul")          # qk - lse, exp, dp - di, * p
MASK_OP = "where"                                         # on the blocks the diagonal crosses


def is_attention(record: OpRecord) -> bool:
    return "scaled_dot_product" in record.name


def softmax_flops_per_score(ops: tuple[str, ...]) -> int:
    return sum(ELEMENTWISE_FLOPS_PER_ELEMENT[op] for op in ops)


def score_blocks(seq_q: int, seq_kv: int, block_q: int, block_kv: int, causal: bool) -> list[tuple[int, int, bool]]:
    """The score blocks the kernel runs, as ``(rows, cols, masked)``: clipped to the sequence
    ends; ``masked`` when the causal diagonal crosses the block (run whole, then masked)."""
    blocks = []
    for b in range(ceil(seq_q / block_q)):
        first, last = b * block_q, min((b + 1) * block_q, seq_q) - 1
        kv_end = min(last + 1, seq_kv) if causal else seq_kv
        for c in range(ceil(kv_end / block_kv)):
            start = c * block_kv
            cols = min(block_kv, seq_kv - start)
            blocks.append((last - first + 1, cols, causal and start + cols - 1 > first))
    return blocks


def _products(rows: int, cols: int, head_dim: int, value_dim: int) -> dict[str, GemmShape]:
    """The per-block MXU products of one query head: ``[M, K] @ [K, N]`` as GemmShape(M, N, K)."""
    return {"qk": GemmShape(rows, cols, head_dim), "pv": GemmShape(rows, value_dim, cols),
            "dp": GemmShape(rows, cols, value_dim), "dv": GemmShape(cols, value_dim, rows),
            "dk": GemmShape(cols, head_dim, rows), "dq": GemmShape(rows, head_dim, cols)}


def _qkv(record: OpRecord) -> tuple[tuple, tuple, tuple]:
    first = int(record.name.endswith("_backward"))       # backward inputs: grad_out, q, k, v, ...
    q, k, v = (t.shape for t in record.inputs[first:first + 3])
    return q, k, v


def attention_passes(record: OpRecord, config) -> list[tuple[list, tuple[str, ...], tuple[str, ...]]]:
    """The kernels one attention op runs, each as (score blocks of one head, MXU products per
    block, VPU softmax ops per score)."""
    q, k, _ = _qkv(record)
    causal = bool(record.attrs.get("is_causal", False))
    if not record.name.endswith("_backward"):
        blocks = score_blocks(q[-2], k[-2], config.attention_block_q, config.attention_block_kv, causal)
        return [(blocks, ("qk", "pv"), SOFTMAX_FORWARD)]
    blocks = score_blocks(q[-2], k[-2], config.attention_block_q_bwd, config.attention_block_kv_bwd, causal)
    if config.attention_fused_backward:
        return [(blocks, ("qk", "dp", "dv", "dk", "dq"), SOFTMAX_BACKWARD)]
    return [(blocks, ("qk", "dp", "dv", "dk"), SOFTMAX_BACKWARD), (blocks, ("qk", "dp", "dq"), SOFTMAX_BACKWARD)]


def attention_work(record: OpRecord, config, padded_flops: Callable[[GemmShape], int]) -> tuple[int, int]:
    """(MXU FLOPs issued, padding included; VPU FLOPs) of one attention op, over all its heads.

    ``padded_flops(shape)`` is the MXU padding rule of ``cost.py``."""
    q, _, v = _qkv(record)
    heads, head_dim, value_dim = prod(q[:-2]), q[-1], v[-1]
    mask = ELEMENTWISE_FLOPS_PER_ELEMENT[MASK_OP]
    mxu = vpu = 0
    for blocks, products, softmax in attention_passes(record, config):
        per_score = softmax_flops_per_score(softmax)
        for rows, cols, masked in blocks:
            shapes = _products(rows, cols, head_dim, value_dim)
            mxu += sum(padded_flops(shapes[p]) for p in products)
            vpu += rows * cols * (per_score + mask * masked)
    return heads * mxu, heads * vpu
