"""Serving simulation speed: 1,000 requests of a Llama-3-8B-shaped model through ``wb.serve`` on
h100 and trn2 (TP4, chunked prefill): host seconds to measure the iteration-cost grid, host
seconds to simulate the load with it cached, and the process's peak RSS."""
from __future__ import annotations

import logging
import resource
import time


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    from transformers import LlamaConfig

    import workbench as wb
    llama3_8b = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                            num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0)
    load = wb.serving.poisson_requests(8.0, 1000, prompt_tokens=(64, 1024), output_tokens=(16, 256), seed=0)
    for target, tp, scheduler in (("h100", 1, "vllm"), ("trn2", 4, "sarathi")):
        started = time.perf_counter()
        first = wb.serve(llama3_8b, load, target=target, tp=tp, scheduler=scheduler, check=False)
        measured = time.perf_counter() - started
        started = time.perf_counter()
        again = wb.serve(llama3_8b, load, target=target, tp=tp, scheduler=scheduler, check=False)
        cached = time.perf_counter() - started
        assert again.summary["ttft_p50_s"] == first.summary["ttft_p50_s"]
        print(f"{target} tp{tp} {scheduler}: 1,000 requests, {len(first.timeline)} iterations; "
              f"{measured:.1f} s host with the cost grid ({first.summary['iteration_shapes_measured']} shapes), "
              f"{cached:.2f} s with it cached")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
