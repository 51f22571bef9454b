"""Timing-only mode on models the host could not run with values: host seconds and peak RSS.

Llama-3.2-1B (``wb.models.Llama``: hidden 2048, 16 layers, 32 heads / 8 KV heads, MLP 8192, vocab
128256, tied embeddings; bf16) does one forward + backward at batch 1, sequence 4096 on one
simulated trn2 NeuronCore, with tensors that hold no values (``torch.neuron.timing_only()``).
Llama-3-8B (its config.json: hidden 4096, 32 layers, 32 / 8 KV heads, MLP
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

import torch
import torch.nn.functional as F

import workbench as wb
from benchmarks import profile_overhead
from workbench.models import Llama, LlamaConfig, llama_config

LLAMA_3_2_1B = llama_config("Llama-3.2-1B")
LLAMA_3_8B = llama_config("Llama-3-8B")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def llama_step(shape: LlamaConfig = LLAMA_3_2_1B, seq: int = 4096, target="trn2",
               profile_host: bool = False) -> dict:
    """Build the model data-free on ``target`` and profile one forward + backward."""
    gc.collect()       # a previous step's tensors leave the simulated HBM
    torch.neuron.set_target(target)
    torch.neuron.reset_peak_memory_stats()
    rss_before = _rss_mib()
    start = time.perf_counter()
    with torch.device("neuron"), torch.neuron.timing_only():
        model = Llama(shape, dtype=torch.bfloat16)
        tokens = torch.randint(0, shape.vocab_size, (1, seq))
    built, cpu_built = time.perf_counter(), time.process_time()
    profiler = cProfile.Profile() if profile_host else None
    error = None
    with wb.profile(target=target) as prof:
        if profiler:
            profiler.enable()
        try:
            logits = model(tokens)
            F.cross_entropy(logits.view(-1, shape.vocab_size).float(), tokens.view(-1)).backward()
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
WHAT_IF_CHIP_HBM = wb.derive("trn2", name="trn2-96GiB", hbm_bytes=96 * 2**30)


def _report(r: dict, shape: LlamaConfig, target_name: str) -> None:
    print(f"{shape.name} ({r['params'] / 1e9:.2f}B params, {shape.num_hidden_layers} layers), bf16, "
          f"batch 1, seq 4096, fwd+bwd on one {target_name} core, timing-only:")
    print(f"  host: build {r['build_s']:.2f} s, step {r['step_s']:.1f} s for {r['ops']} ops "
          f"({r['step_s'] / max(r['ops'], 1) * 1e3:.1f} ms/op; {r['step_cpu_s']:.1f} s CPU); peak RSS {r['peak_rss_mib']:.0f} MiB "
          f"(step grew it {r['rss_growth_mib']:.0f} MiB)  [aim: under 10 s and 2 GiB]")
    if r["oom"]:
        print(f"  simulated HBM ran out after {r['simulated_ms']:.1f} ms simulated: {r['oom']}")
    else:
        print(f"  simulated step {r['simulated_ms']:.1f} ms; peak HBM {r['peak_hbm_gib']:.2f} GiB")


def llama_inference(shape: LlamaConfig = LLAMA_3_8B, prompt: int = 4096, target=WHAT_IF_CHIP_HBM) -> dict:
    """Build the model data-free on ``target``; profile a prefill of ``prompt`` tokens, then one
    decode step reading the KV cache it left (each phase: host s, CPU s, ops, simulated ms)."""
    gc.collect()
    torch.neuron.set_target(target)
    torch.neuron.reset_peak_memory_stats()
    start = time.perf_counter()
    with torch.device("neuron"), torch.neuron.timing_only():
        model = Llama(shape, dtype=torch.bfloat16)
        tokens = torch.randint(0, shape.vocab_size, (1, prompt))
    out = {"params": sum(p.numel() for p in model.parameters()), "build_s": time.perf_counter() - start}
    torch.neuron.reset_peak_memory_stats()          # peak HBM of inference, not of building
    cache = model.new_cache()
    with torch.no_grad():
        for phase, begin in (("prefill", 0), ("decode", prompt)):
            wall, cpu = time.perf_counter(), time.process_time()
            with wb.profile(target=target) as prof:
                tokens = model(tokens, cache, begin, logits_to_keep=1).argmax(-1)
            out[phase] = {"host_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                          "ops": len(prof.trace.ops), "simulated_ms": prof.summary["total_time"] * 1e3}
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["peak_hbm_gib"] = torch.neuron.max_memory_allocated() / 2**30
    return out


def _report_inference(r: dict, shape: LlamaConfig, prompt: int, target_name: str) -> None:
    print(f"{shape.name} ({r['params'] / 1e9:.2f}B params, {shape.num_hidden_layers} layers), bf16, batch 1, on one "
          f"{target_name} core, timing-only (build {r['build_s']:.2f} s):")
    for phase, what in (("prefill", f"prefill of {prompt} tokens"), ("decode", "one decode step, KV cache")):
        p = r[phase]
        print(f"  {what}: host {p['host_s']:.1f} s ({p['cpu_s']:.1f} s CPU) for {p['ops']} ops; "
              f"simulated {p['simulated_ms']:.2f} ms  [aim: under 10 s]")
    print(f"  peak RSS {r['peak_rss_mib']:.0f} MiB [aim: under 2 GiB]; peak HBM {r['peak_hbm_gib']:.2f} GiB")


def main(layers: int | None = None) -> None:
    shape = LLAMA_3_2_1B if layers is None else LLAMA_3_2_1B.replace(num_hidden_layers=layers)
    r = llama_step(shape)
    _report(r, shape, "trn2")
    if r["oom"]:
        _report(llama_step(shape, target=WHAT_IF_CHIP_HBM), shape, WHAT_IF_CHIP_HBM.name)
    big = LLAMA_3_8B if layers is None else LLAMA_3_8B.replace(num_hidden_layers=layers)
    _report_inference(llama_inference(big), big, 4096, WHAT_IF_CHIP_HBM.name)
    torch.neuron.set_target("trn2")
    profile_overhead.main()


def where_host_time_goes(layers: int = 1, top: int = 12) -> None:
    """cProfile of one step (``python -c 'from benchmarks.timing_only import *; where_host_time_goes()'``)."""
    r = llama_step(LLAMA_3_2_1B.replace(num_hidden_layers=layers), profile_host=True)
    pstats.Stats(r["host_profile"]).sort_stats("cumulative").print_stats(top)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else None)
