"""Predicted bf16 GEMM throughput and large-copy bandwidth of each GPU preset, next to peaks.

Run: ``python -m benchmarks.gpu_gemm``. Every number goes through the same path the CUDA device
uses (OpRecord -> GpuSession -> Trace), so it also checks the FLOP/byte wiring.
"""
from __future__ import annotations

import argparse

from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.gpu import PRESETS, GpuConfig, GpuSession

GEMM_SIZES = tuple(2**p for p in range(8, 14))     # 256 .. 8192
COPY_BYTES = 2**30                                  # 1 GiB


def _run(config: GpuConfig, record: OpRecord, graph_replay: bool):
    session = GpuSession(config, graph_replay=graph_replay)
    session.feed(record)
    return session.trace.ops[0]


def gemm_rows(config: GpuConfig, graph_replay: bool = False) -> list[tuple]:
    """(n, time_us, TFLOP/s, % of bf16 peak) for square bf16 mm of each size."""
    rows = []
    for n in GEMM_SIZES:
        a = TensorDesc((n, n), "bfloat16")
        op = _run(config, OpRecord(0, "aten::mm", (a, a), (a,)), graph_replay)
        tflops = op.flops / op.time_ns * 1e-3
        rows.append((n, op.time_ns * 1e-3, tflops, 100 * tflops * 1e12 / config.bf16_tensor_flops_per_s))
    return rows


def copy_row(config: GpuConfig) -> tuple[float, float]:
    """(time_us, GB/s counting read + write) for a 1 GiB device-to-device clone."""
    t = TensorDesc((COPY_BYTES // 4,), "float32")
    op = _run(config, OpRecord(0, "aten::clone", (t,), (t,)), False)
    return op.time_ns * 1e-3, op.hbm_bytes / op.time_ns


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--graph-replay", action="store_true",
                        help="charge the CUDA-graph launch overhead instead of the eager one")
    args = parser.parse_args(argv)
    for config in PRESETS.values():
        peak_t = config.bf16_tensor_flops_per_s * 1e-12
        print(f"\n{config.name}: bf16 dense peak {peak_t:.0f} TFLOP/s, "
              f"HBM {config.hbm_bytes_per_s * 1e-9:.0f} GB/s, {config.sm_count} SMs")
        print(f"{'bf16 mm n^3':>12} {'time us':>10} {'TFLOP/s':>9} {'% peak':>7}")
        for n, us, tflops, pct in gemm_rows(config, args.graph_replay):
            print(f"{n:>12} {us:>10.1f} {tflops:>9.1f} {pct:>7.1f}")
        us, gbps = copy_row(config)
        print(f"{'1 GiB copy':>12} {us:>10.1f} {gbps:>7.0f} GB/s "
              f"({100 * gbps * 1e9 / config.hbm_bytes_per_s:.1f}% of HBM peak)")


if __name__ == "__main__":
    main()
