"""Predicted bf16 GEMM throughput and large-copy bandwidth of each GPU preset, next to peaks,
and the GPU rows of the fidelity table (``gpu_fidelity_rows``).

Run: ``python -m benchmarks.gpu_gemm``. Every number goes through the same path the CUDA device
uses (OpRecord -> GpuSession -> Trace), so it also checks the FLOP/byte wiring.
"""
from __future__ import annotations

import argparse

from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.gpu import PRESETS, GemmShape, GpuConfig, GpuSession, a100, gemm_cost, gh200

__all__ = ["GEMM_SIZES", "gemm_rows", "copy_row", "gemm_device_tflops", "gpu_fidelity_rows",
           "MAMF_RESULTS", "main"]

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


def gemm_device_tflops(config: GpuConfig, shape: GemmShape, dtype: str = "bfloat16") -> float:
    """Predicted TFLOP/s of one GEMM kernel in a back-to-back stream, where launches hide under
    the kernels before them (as in a timing loop): device time only."""
    return shape.flops / gemm_cost(config, shape, dtype, launch_ns=0.0).device_ns * 1e-3


_MAMF_SOURCE = "hardware.md published results: ml-engineering compute/accelerator README, MAMF table"
# (workload, config, shape M x N x K, published TFLOP/s, source) from hardware.md's published
# results; MAMF reports the best shape of its sweep, timed back to back with CUDA events.
MAMF_RESULTS = (
    ("bf16 matmul, MAMF best shape 6912x16384x2048", a100, GemmShape(6912, 16384, 2048), 267.9,
     f"{_MAMF_SOURCE} (A100 SXM, CUDA 12.1)"),
    ("bf16 matmul, MAMF best shape 11264x19712x1536", gh200, GemmShape(11264, 19712, 1536), 821.0,
     f"{_MAMF_SOURCE} (GH200, CUDA 12.5); modelled as presets.gh200, the H100 die with "
     "GH200's HBM3 (NVIDIA GH200 datasheet)"),
)


def gpu_fidelity_rows() -> list[dict]:
    """Predicted vs published for the GPU entries of hardware.md's published results.

    Note the efficiency ceiling is itself read from these measurements (presets.py), so the
    ratio shows what the tile model's wave, padding, L2-feed and ramp losses leave of it at the
    best shape: a check of the losses, not an independent prediction of the ceiling.
    """
    from backend.sim.sensitivity import time_band

    rows = []
    for workload, config, shape, published, source in MAMF_RESULTS:
        predicted = gemm_device_tflops(config, shape)
        flops = 2 * shape.m * shape.n * shape.k
        # the same GEMM re-run with the preset's ASSUMPTION fields at their range ends
        band = time_band(lambda cfg, s=shape: s.flops / (gemm_device_tflops(cfg, s) * 1e3), config)
        rows.append({"workload": workload, "hardware": config.name, "predicted": predicted,
                     "published": published, "unit": "TFLOP/s", "ratio": predicted / published,
                     "source": source, "flops": flops,
                     # the same comparison as times, for tables of predicted / published time
                     "predicted_ns": flops / (predicted * 1e3), "published_ns": flops / (published * 1e3),
                     "band": band})
    return rows


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
    print("\npredicted vs published (GPU)")
    for row in gpu_fidelity_rows():
        print(f"{row['hardware']:>6} {row['workload']:48s} {row['predicted']:7.1f} / "
              f"{row['published']:7.1f} {row['unit']}  ratio {row['ratio']:.3f}")


if __name__ == "__main__":
    main()
