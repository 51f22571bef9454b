"""Calibrate the GPU cost model against a real GPU: predicted / measured, in one short run.

Needs a machine with CUDA (never part of the tests). The workload is recorded once on the
`neuron` device (CPU-backed, so it runs anywhere) to get its op records; the GPU model predicts
each case from those records, and the same case is timed on the real GPU with CUDA events.

    python -m benchmarks.gpu_calibration --preset h200     # on the GPU machine
"""
from __future__ import annotations

import argparse

import torch

import workbench  # noqa: F401  (registers neuron: used only to record op shapes)
from backend import recording
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.gpu import GpuSession


class _Records:
    def __init__(self):
        self.records = []

    def feed(self, record):
        self.records.append(record)


REPEAT = 20


def predicted_us(records, preset: str, repeat: int = REPEAT) -> float:
    """Per-call time of ``repeat`` back-to-back calls, as ``measured_us`` times them: launches
    overlap the kernels before them, so only the first call's launch is exposed."""
    session = GpuSession(preset)
    for _ in range(repeat):
        for record in records:
            if record.transfer is None:
                session.feed(record)
    return session.trace.summary()["total_time"] * 1e6 / repeat


def measured_us(fn, repeat: int = REPEAT) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / repeat


def gemm_case(n: int):
    desc = TensorDesc((n, n), "bfloat16", (n, 1))
    record = OpRecord(0, "aten::mm", (desc, desc), (desc,))
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return f"bf16 GEMM {n}^3", [record], lambda: a @ a, 2 * n**3


def add_case(numel: int):
    desc = TensorDesc((numel,), "float32", (1,))
    record = OpRecord(0, "aten::add", (desc, desc), (desc,))
    x = torch.randn(numel, device="cuda")
    return f"fp32 add {numel / 2**20:.0f} Mi elements", [record], lambda: x + x, 0


def transformer_case():
    def build(device):
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
        return layer.to(device, torch.bfloat16), torch.randn(8, 256, 512, device=device, dtype=torch.bfloat16)

    model, x = build("neuron")
    sink = _Records()
    with recording.recording(sink):
        model(x).float().sum().backward()
    gpu_model, gpu_x = build("cuda")
    return "transformer layer fwd+bwd (bf16, 8x256x512)", sink.records, \
        lambda: gpu_model(gpu_x).float().sum().backward(), 0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="h200")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: calibration needs a real GPU (the cost model itself needs none)")
        return
    cases = [gemm_case(n) for n in (512, 1024, 2048, 4096, 8192)]
    cases += [add_case(n) for n in (1 << 16, 1 << 24, 1 << 28)]
    cases.append(transformer_case())
    print(f"GPU: {torch.cuda.get_device_name()} vs preset {args.preset}")
    print(f"{'case':46s} {'predicted':>12s} {'measured':>12s} {'pred/meas':>10s}")
    for name, records, fn, flops in cases:
        pred, meas = predicted_us(records, args.preset), measured_us(fn)
        extra = f"  ({flops / meas / 1e6:.0f} TFLOP/s measured)" if flops else ""
        print(f"{name:46s} {pred:10.1f}us {meas:10.1f}us {pred / meas:10.2f}{extra}")


if __name__ == "__main__":
    main()
