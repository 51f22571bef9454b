"""Timing-only mode on models the host could not run with values: host seconds and peak RSS.

A Llama-3.2-1B-shaped model (hidden 2048, 16 layers, 32 heads / 8 KV heads, MLP 8192, vocab
128256, tied embeddings; bf16) does one forward + backward at batch 1, sequence 4096 on one
simulated trn2 NeuronCore, with tensors that hold no values (``torch.neuron.timing_only()``).
Llama-3-8B (Hugging Face ``LlamaConfig`` defaults: hidden 4096, 32 layers, 32 / 8 KV heads, MLP
14336, vocab 128256, untied head; bf16) prefills 4096 tokens and decodes one token with a KV
cache on a what-if core holding a whole trn2 chip's HBM. Prints host seconds (wall and CPU) and
peak host RSS for each, the simulated times, and what profiling adds to host time
(``benchmarks.profile_overhead``).
Run: python -m benchmarks.timing_only [layers]
"""
from __future__ import annotations

import cProfile
import gc
import pstats
import resource
import sys
import time
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

import workbench as wb
from backend.sim.presets import derive
from benchmarks import profile_overhead


@dataclass(frozen=True)
class LlamaShape:
    vocab: int = 128256
    hidden: int = 2048
    layers: int = 16
    heads: int = 32
    kv_heads: int = 8
    mlp: int = 8192
    rope_theta: float = 500000.0
    eps: float = 1e-5
    tied: bool = True


LLAMA_3_2_1B = LlamaShape()
LLAMA_3_8B = LlamaShape(hidden=4096, layers=32, mlp=14336, tied=False)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.s, head_dim = s, s.hidden // s.heads
        self.input_layernorm = RMSNorm(s.hidden, s.eps)
        self.q_proj = nn.Linear(s.hidden, s.heads * head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden, s.kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden, s.kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(s.heads * head_dim, s.hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(s.hidden, s.eps)
        self.gate_proj = nn.Linear(s.hidden, s.mlp, bias=False)
        self.up_proj = nn.Linear(s.hidden, s.mlp, bias=False)
        self.down_proj = nn.Linear(s.mlp, s.hidden, bias=False)

    def forward(self, x, cos, sin, cache: list | None = None):
        """``cache``: this layer's ``[keys, values]`` so far (appended to, as Hugging Face's
        DynamicCache does), or None without one."""
        b, t, _ = x.shape
        s, head_dim = self.s, self.s.hidden // self.s.heads
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, s.heads, head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, s.kv_heads, head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, s.kv_heads, head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:
            if cache:
                k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)
            cache[:] = [k, v]
        groups = s.heads // s.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, s.hidden))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, s: LlamaShape = LLAMA_3_2_1B):
        super().__init__()
        self.s = s
        self.embed_tokens = nn.Embedding(s.vocab, s.hidden)
        self.layers = nn.ModuleList(LlamaBlock(s) for _ in range(s.layers))
        self.norm = RMSNorm(s.hidden, s.eps)
        self.lm_head = nn.Linear(s.hidden, s.vocab, bias=False)
        if s.tied:
            self.lm_head.weight = self.embed_tokens.weight     # as in Llama-3.2-1B

    def forward(self, tokens, cache: list | None = None, start: int = 0, last_only: bool = False):
        """Logits of ``tokens`` at positions ``start``... (of the last one only with ``last_only``,
        as generation asks for); ``cache``: one ``[k, v]`` list per layer, filled (prefill) or
        extended (decode), or None for a plain forward."""
        t, head_dim = tokens.shape[1], self.s.hidden // self.s.heads
        inv_freq = 1.0 / self.s.rope_theta ** (torch.arange(0, head_dim, 2, device=tokens.device).float() / head_dim)
        angles = torch.outer(torch.arange(start, start + t, device=tokens.device).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        dtype = self.embed_tokens.weight.dtype
        cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
        x = self.embed_tokens(tokens)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if cache is None else cache[i])
        return self.lm_head(self.norm(x[:, -1:] if last_only else x))


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def llama_step(shape: LlamaShape = LLAMA_3_2_1B, seq: int = 4096, target="trn2",
               profile_host: bool = False) -> dict:
    """Build the model data-free on ``target`` and profile one forward + backward."""
    gc.collect()       # a previous step's tensors leave the simulated HBM
    torch.neuron.set_target(target)
    torch.neuron.reset_peak_memory_stats()
    rss_before = _rss_mib()
    start = time.perf_counter()
    with torch.device("neuron"), torch.neuron.timing_only():
        model = Llama(shape).to(torch.bfloat16)
        tokens = torch.randint(0, shape.vocab, (1, seq))
    built, cpu_built = time.perf_counter(), time.process_time()
    profiler = cProfile.Profile() if profile_host else None
    error = None
    with wb.profile(target=target) as prof:
        if profiler:
            profiler.enable()
        try:
            logits = model(tokens)
            F.cross_entropy(logits.view(-1, shape.vocab).float(), tokens.view(-1)).backward()
        except torch.OutOfMemoryError as exc:     # the simulated HBM, not the host, says no
            error = str(exc)
        finally:
            if profiler:
                profiler.disable()
    done = time.perf_counter()
    out = {
        "params": sum(p.numel() for p in model.parameters()),
        "build_s": built - start, "step_s": done - built, "step_cpu_s": time.process_time() - cpu_built,
        "ops": len(prof.trace.ops), "rss_growth_mib": _rss_mib() - rss_before,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "simulated_ms": prof.summary["total_time"] * 1e3,
        "peak_hbm_gib": torch.neuron.max_memory_allocated() / 2**30, "oom": error,
    }
    if profiler:
        out["host_profile"] = profiler
    return out


# A trn2 NeuronCore has 12 GiB of HBM (96 GiB per chip / 8 cores). Where the step does not fit
# there, it runs again on a what-if core holding the whole chip's HBM, to show what it would need.
WHAT_IF_CHIP_HBM = derive("trn2", name="trn2-96GiB", hbm_bytes=96 * 2**30)


def _report(r: dict, shape: LlamaShape, target_name: str) -> None:
    print(f"Llama-3.2-1B-shaped ({r['params'] / 1e9:.2f}B params, {shape.layers} layers), bf16, "
          f"batch 1, seq 4096, fwd+bwd on one {target_name} core, timing-only:")
    print(f"  host: build {r['build_s']:.2f} s, step {r['step_s']:.1f} s for {r['ops']} ops "
          f"({r['step_s'] / max(r['ops'], 1) * 1e3:.1f} ms/op; {r['step_cpu_s']:.1f} s CPU); peak RSS {r['peak_rss_mib']:.0f} MiB "
          f"(step grew it {r['rss_growth_mib']:.0f} MiB)  [aim: under 10 s and 2 GiB]")
    if r["oom"]:
        print(f"  simulated HBM ran out after {r['simulated_ms']:.1f} ms simulated: {r['oom']}")
    else:
        print(f"  simulated step {r['simulated_ms']:.1f} ms; peak HBM {r['peak_hbm_gib']:.2f} GiB")


def llama_inference(shape: LlamaShape = LLAMA_3_8B, prompt: int = 4096, target=WHAT_IF_CHIP_HBM) -> dict:
    """Build the model data-free on ``target``; profile a prefill of ``prompt`` tokens, then one
    decode step reading the KV cache it left (each phase: host s, CPU s, ops, simulated ms)."""
    gc.collect()
    torch.neuron.set_target(target)
    torch.neuron.reset_peak_memory_stats()
    start = time.perf_counter()
    with torch.device("neuron"), torch.neuron.timing_only():
        model = Llama(shape).to(torch.bfloat16)
        tokens = torch.randint(0, shape.vocab, (1, prompt))
    out = {"params": sum(p.numel() for p in model.parameters()), "build_s": time.perf_counter() - start}
    torch.neuron.reset_peak_memory_stats()          # peak HBM of inference, not of building in fp32
    cache = [[] for _ in range(shape.layers)]
    with torch.no_grad():
        for phase, begin in (("prefill", 0), ("decode", prompt)):
            wall, cpu = time.perf_counter(), time.process_time()
            with wb.profile(target=target) as prof:
                tokens = model(tokens, cache, begin, last_only=True).argmax(-1)
            out[phase] = {"host_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                          "ops": len(prof.trace.ops), "simulated_ms": prof.summary["total_time"] * 1e3}
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["peak_hbm_gib"] = torch.neuron.max_memory_allocated() / 2**30
    return out


def _report_inference(r: dict, shape: LlamaShape, prompt: int, target_name: str) -> None:
    print(f"Llama-3-8B ({r['params'] / 1e9:.2f}B params, {shape.layers} layers), bf16, batch 1, on one "
          f"{target_name} core, timing-only (build {r['build_s']:.2f} s):")
    for phase, what in (("prefill", f"prefill of {prompt} tokens"), ("decode", "one decode step, KV cache")):
        p = r[phase]
        print(f"  {what}: host {p['host_s']:.1f} s ({p['cpu_s']:.1f} s CPU) for {p['ops']} ops; "
              f"simulated {p['simulated_ms']:.2f} ms  [aim: under 10 s]")
    print(f"  peak RSS {r['peak_rss_mib']:.0f} MiB [aim: under 2 GiB]; peak HBM {r['peak_hbm_gib']:.2f} GiB")


def main(layers: int | None = None) -> None:
    shape = LLAMA_3_2_1B if layers is None else LlamaShape(layers=layers)
    r = llama_step(shape)
    _report(r, shape, "trn2")
    if r["oom"]:
        _report(llama_step(shape, target=WHAT_IF_CHIP_HBM), shape, WHAT_IF_CHIP_HBM.name)
    big = LLAMA_3_8B if layers is None else replace(LLAMA_3_8B, layers=layers)
    _report_inference(llama_inference(big), big, 4096, WHAT_IF_CHIP_HBM.name)
    torch.neuron.set_target("trn2")
    profile_overhead.main()


def where_host_time_goes(layers: int = 1, top: int = 12) -> None:
    """cProfile of one step (``python -c 'from benchmarks.timing_only import *; where_host_time_goes()'``)."""
    r = llama_step(LlamaShape(layers=layers), profile_host=True)
    pstats.Stats(r["host_profile"]).sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else None)
