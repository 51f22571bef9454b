"""Lowering: an aten op (or a fused group of ops) -> a simulator Program. Never imports torch."""
from backend.lowering.flops import is_matmul_like, op_flops, op_min_bytes

__all__ = ["op_flops", "is_matmul_like", "op_min_bytes"]
