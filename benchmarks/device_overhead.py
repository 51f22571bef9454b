"""Overhead of the neuron device itself (no simulation): ratios measured in one run.

- tiny op (64x64 add) on neuron vs plain CPU eager, and vs a no-op TorchDispatchMode (the floor
  for any Python-dispatched device);
- a small transformer forward+backward on neuron vs CPU eager;
- host RSS of a model on neuron vs the same model on CPU (no shadow copies), and the peak of a
  training step.
Run: python -m benchmarks.device_overhead
"""
from __future__ import annotations

import copy
import gc
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import workbench  # noqa: F401


class NoOpMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class BareWrapper(torch.Tensor):
    """The least any wrapper-subclass device can do per op: unwrap two, compute, wrap one."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, inner, device):
        out = torch.Tensor._make_wrapper_subclass(
            cls, inner.size(), strides=inner.stride(), storage_offset=inner.storage_offset(),
            dtype=inner.dtype, device=device)
        out._inner = inner
        return out

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        a, b = args
        return BareWrapper(func(a._inner, b._inner), a.device)


def per_call_us(fn, repeat: int = 2000) -> float:
    for _ in range(50):
        fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat // 5):
            fn()
        best = min(best, (time.perf_counter() - start) / (repeat // 5))
    return best * 1e6


def tiny_op() -> dict:
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    da, db = a.to("neuron"), b.to("neuron")
    cpu = per_call_us(lambda: a + b)
    with NoOpMode():
        noop = per_call_us(lambda: a + b)
    dev = per_call_us(lambda: da + db)
    wa, wb = BareWrapper(a, da.device), BareWrapper(b, db.device)
    bare = per_call_us(lambda: wa + wb)
    return {"cpu_us": cpu, "noop_mode_us": noop, "bare_wrapper_us": bare, "neuron_us": dev}


def small_transformer():
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def transformer_step(repeat: int = 7) -> dict:
    """Best-of-N forward+backward, CPU and neuron interleaved so machine noise hits both."""
    torch.manual_seed(0)
    model = small_transformer()
    x = torch.randn(8, 128, 256)
    runs = {"cpu": (model, x), "neuron": (copy.deepcopy(model).to("neuron"), x.to("neuron"))}
    best = {name: float("inf") for name in runs}
    for i in range(repeat + 1):
        for name, (m, inp) in runs.items():
            start = time.perf_counter()
            m(inp).sum().backward()
            if i:  # first round warms up
                best[name] = min(best[name], time.perf_counter() - start)
    return {"cpu_ms": best["cpu"] * 1e3, "neuron_ms": best["neuron"] * 1e3}


def host_rss_ratio() -> dict:
    """Peak RSS growth while building and running a ~100 MB model, CPU vs neuron, in subprocesses."""
    import subprocess
    import sys

    # Resident-set growth from just before the model is built to just after its forward
    # (ru_maxrss is useless here: importing torch._dynamo has a transient peak above both).
    code = """
import psutil, torch, workbench, sys
dev = sys.argv[1]
torch.ones(1, device=dev) + 1
proc = psutil.Process()
base = proc.memory_info().rss
torch.manual_seed(0)
m = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(24)])
m.to(dev)
with torch.no_grad():
    y = m(torch.randn(16, 1024, device=dev))
print((proc.memory_info().rss - base) // 1024)
"""
    out = {}
    for dev in ("cpu", "neuron"):
        res = subprocess.run([sys.executable, "-c", code, dev], capture_output=True, text=True, check=True)
        out[f"{dev}_rss_growth_mib"] = int(res.stdout.split()[-1]) / 1024
    return out


TRAINING_STEP_RSS = """
import gc, sys, torch, workbench
device, optimizer = sys.argv[1], sys.argv[2]
torch.ones(1, device=device) + 1
def status_mib(key):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith(key))
gc.collect()
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")                  # the peak (VmHWM) restarts from the current RSS
base = status_mib("VmRSS:")
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(16)]).to(device)
opt = (torch.optim.AdamW if optimizer == "adamw" else torch.optim.SGD)(model.parameters(), lr=1e-3)
x = torch.randn(64, 2048, device=device)
model(x).square().mean().backward()
opt.step()
opt.zero_grad()
print(status_mib("VmHWM:") - base, status_mib("VmRSS:") - base)
"""


def training_step_rss(device: str, optimizer: str = "adamw") -> dict:
    """Host RSS of building a 16 x 2048^2 MLP (256 MiB) on ``device`` and training it one step,
    in a fresh interpreter: the peak growth (VmHWM, reset through /proc/self/clear_refs; Linux)
    and the growth still resident at the end, in MiB."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", TRAINING_STEP_RSS, device, optimizer],
                         capture_output=True, text=True, check=True)
    peak, end = map(float, res.stdout.split()[-2:])
    return {"peak_mib": peak, "end_mib": end}


def main() -> None:
    op = tiny_op()
    print("device overhead (wall time, best of 5)")
    print(f"  64x64 add: cpu {op['cpu_us']:.1f} us | no-op dispatch mode {op['noop_mode_us']:.1f} us | "
          f"neuron {op['neuron_us']:.1f} us")
    print(f"  neuron / cpu = {op['neuron_us'] / op['cpu_us']:.2f}x ; "
          f"neuron / no-op dispatch mode = {op['neuron_us'] / op['noop_mode_us']:.2f}x (aim <= 1.5x)")
    print(f"  floor of any wrapper-subclass device (bare unwrap/compute/wrap): {op['bare_wrapper_us']:.1f} us "
          f"= {op['bare_wrapper_us'] / op['noop_mode_us']:.2f}x the no-op mode; "
          f"neuron / bare wrapper = {op['neuron_us'] / op['bare_wrapper_us']:.2f}x")
    tf = transformer_step()
    print(f"  transformer fwd+bwd (2 layers, d=256, 8x128 tokens): cpu {tf['cpu_ms']:.1f} ms | "
          f"neuron {tf['neuron_ms']:.1f} ms | ratio {tf['neuron_ms'] / tf['cpu_ms']:.2f}x (aim <= 1.15x)")
    gc.collect()
    rss = host_rss_ratio()
    print(f"  host RSS growth, 96 MiB model: cpu {rss['cpu_rss_growth_mib']:.0f} MiB | "
          f"neuron {rss['neuron_rss_growth_mib']:.0f} MiB | ratio "
          f"{rss['neuron_rss_growth_mib'] / rss['cpu_rss_growth_mib']:.2f}x (aim <= 1.1x)")
    for optimizer in ("sgd", "adamw"):
        cpu, neuron = training_step_rss("cpu", optimizer), training_step_rss("neuron", optimizer)
        print(f"  host RSS of a 16 x 2048^2 MLP training step ({optimizer}): peak growth cpu "
              f"{cpu['peak_mib']:.0f} MiB | neuron {neuron['peak_mib']:.0f} MiB | ratio "
              f"{neuron['peak_mib'] / cpu['peak_mib']:.2f}x (aim <= 1.1x); still resident after it: "
              f"cpu {cpu['end_mib']:.0f} MiB | neuron {neuron['end_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
