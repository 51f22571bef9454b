"""torch.compile(backend="neuron") against inductor and aot_eager: ratios measured in one run.

- compile wall time (first training step, which traces and compiles forward and backward) of a
  small GPT (2 layers, d=128): neuron on the neuron device vs inductor and aot_eager on CPU;
- steady-state wall time per training step, compiled vs eager, on each device;
- simulated eager vs compiled on the same NeuronCore target: total time, HBM bytes, launches.
Run: python -m benchmarks.compile_bench
"""
from __future__ import annotations

import logging
import math
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import workbench  # noqa: F401  (registers the device)

log = logging.getLogger("benchmarks.compile_bench")

__all__ = ["TinyGPT", "Block", "train_step", "main"]


# -- the model --------------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    """nanoGPT-style attention written out (matmul -> mask -> softmax -> matmul)."""

    def __init__(self, d: int, heads: int, seq: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d: int = 128, heads: int = 4, seq: int = 64):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, seq)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 256, d: int = 128, heads: int = 4, layers: int = 2, seq: int = 64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, seq) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos.weight[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def train_step(model, opt, idx, targets):
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


# -- measurements -----------------------------------------------------------------------------
VOCAB, BATCH, SEQ = 256, 8, 64


def _setup(device: str, seed: int = 0):
    torch.manual_seed(seed)
    model = TinyGPT(vocab=VOCAB, seq=SEQ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    idx = torch.randint(0, VOCAB, (BATCH, SEQ)).to(device)
    tgt = torch.randint(0, VOCAB, (BATCH, SEQ)).to(device)
    return model, opt, idx, tgt


def _steady_s(fn, steps: int = 5) -> float:
    """Median wall time of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def compile_run(backend: str | None, device: str) -> dict:
    """First-step wall time (trace + compile + run) and steady step time of one setup."""
    torch._dynamo.reset()
    model, opt, idx, tgt = _setup(device)
    target = torch.compile(model, backend=backend) if backend else model
    start = time.perf_counter()
    train_step(target, opt, idx, tgt)
    first = time.perf_counter() - start
    steady = _steady_s(lambda: train_step(target, opt, idx, tgt))
    return {"first_step_s": first, "compile_s": max(0.0, first - steady), "step_s": steady}


def simulated(target: str = "trn2") -> dict:
    """Simulated forward+backward of one batch, eager vs compiled, on the same NeuronCore."""
    from backend import recording
    from backend.lowering import EagerSession

    torch._dynamo.reset()
    model, _, idx, tgt = _setup("neuron")
    compiled = torch.compile(model, backend="neuron")

    def fwd_bwd(m):
        logits = m(idx)
        F.cross_entropy(logits.view(-1, VOCAB), tgt.view(-1)).backward()

    fwd_bwd(compiled)                                   # compile outside the measurement
    out = {}
    for label, m in (("eager", model), ("compiled", compiled)):
        session = EagerSession(target)
        with recording.recording(session):
            fwd_bwd(m)
        s = session.trace.summary()
        out[label] = {"time_ns": s["total_time_ns"], "hbm_bytes": s["hbm_read_bytes"] + s["hbm_write_bytes"],
                      "launches": sum(1 for op in session.trace.ops if op.kind in ("op", "kernel", "fallback")),
                      "tensor_active_pct": s["tensor_engine_active_time_percent"]}
    return out


def _try(label: str, fn):
    try:
        return fn()
    except Exception as exc:   # a backend that cannot run here is reported, not fatal
        print(f"  {label}: FAILED ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})")
        return None


def main() -> int:
    import backend.compile

    backend.compile.register()
    # Cold compiles: Inductor's on-disk caches would make every run after the first a cache hit.
    import torch._inductor.config as inductor_config

    inductor_config.force_disable_caches = True
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    print(f"TinyGPT 2 layers, d=128, batch {BATCH}x{SEQ}, SGD training step; torch {torch.__version__}; "
          f"inductor caches off (cold compile)")
    runs = {
        "neuron eager": _try("neuron eager", lambda: compile_run(None, "neuron")),
        "neuron compiled (neuron)": _try("neuron backend", lambda: compile_run("neuron", "neuron")),
        "cpu eager": _try("cpu eager", lambda: compile_run(None, "cpu")),
        "cpu compiled (aot_eager)": _try("aot_eager", lambda: compile_run("aot_eager", "cpu")),
        "cpu compiled (inductor)": _try("inductor", lambda: compile_run("inductor", "cpu")),
    }
    print(f"\n{'setup':28} {'first step s':>13} {'compile s':>10} {'step ms':>9}")
    for label, r in runs.items():
        if r:
            print(f"{label:28} {r['first_step_s']:13.2f} {r['compile_s']:10.2f} {r['step_s'] * 1e3:9.1f}")
    neuron = runs["neuron compiled (neuron)"]
    print("\nratios (measured in this run):")
    for other in ("cpu compiled (aot_eager)", "cpu compiled (inductor)"):
        if neuron and runs[other]:
            print(f"  compile time neuron / {other.split('(')[1][:-1]}: "
                  f"{neuron['compile_s'] / max(runs[other]['compile_s'], 1e-9):.2f}x")
    for device, compiled in (("neuron", "neuron compiled (neuron)"), ("cpu", "cpu compiled (inductor)"),
                             ("cpu", "cpu compiled (aot_eager)")):
        eager = runs[f"{device} eager"]
        if eager and runs[compiled]:
            print(f"  step time {compiled} / {device} eager: {runs[compiled]['step_s'] / eager['step_s']:.2f}x")
    sim = _try("simulation", simulated)
    if sim:
        e, c = sim["eager"], sim["compiled"]
        print("\nsimulated fwd+bwd on trn2 (eager -> compiled):")
        print(f"  time      {e['time_ns'] / 1e3:10.1f} us -> {c['time_ns'] / 1e3:10.1f} us  "
              f"(eager/compiled {e['time_ns'] / c['time_ns']:.2f}x)")
        print(f"  HBM bytes {e['hbm_bytes'] / 1e6:10.2f} MB -> {c['hbm_bytes'] / 1e6:10.2f} MB  "
              f"(eager/compiled {e['hbm_bytes'] / c['hbm_bytes']:.2f}x)")
        print(f"  launches  {e['launches']:10d}    -> {c['launches']:10d}     "
              f"(eager/compiled {e['launches'] / c['launches']:.2f}x)")
        print(f"  TensorE active {e['tensor_active_pct']:.1f}% -> {c['tensor_active_pct']:.1f}%")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
