"""``make bench``: every benchmark, each printing ratios measured in its own single run."""
import importlib
import sys
import time

BENCHMARKS = (
    "benchmarks.device_overhead",   # neuron vs CPU eager vs no-op dispatch; host RSS
    "benchmarks.compile_bench",     # compile time; eager vs compiled wall and simulated
    "benchmarks.gpu_gemm",          # GPU cost model: bf16 GEMM TFLOP/s and copy bandwidth
    "benchmarks.fidelity",          # simulator vs published Trainium results; sim speed
    "benchmarks.timing_only",       # Llama-3.2-1B-shaped fwd+bwd without values: host s, peak RSS
    "benchmarks.ddp_what_if",       # ViT-B/16 under DDP on a 32-rank fake world, timing-only: host s
    "benchmarks.serving_bench",     # 1,000 requests through wb.serve on h100 and trn2: host s, peak RSS
)


def main(names=BENCHMARKS) -> int:
    failed = []
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        try:
            importlib.import_module(name).main()
        except Exception as exc:  # report and go on: one broken benchmark should not hide the rest
            failed.append(name)
            print(f"FAILED: {type(exc).__name__}: {exc}")
        print(f"({time.perf_counter() - start:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(tuple(sys.argv[1:]) or BENCHMARKS))
