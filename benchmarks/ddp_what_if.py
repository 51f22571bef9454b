"""A data-parallel what-if without values: Hugging Face ViT-B/16 at batch 64 per rank under
``DistributedDataParallel`` on one rank of a 32-rank fake world (one trn1.32xlarge, a rank per
NeuronCore), built and stepped timing-only. Prints host seconds, peak host RSS and what the step
simulates to (compute, exposed all-reduce)."""
from __future__ import annotations

import resource
import time

import torch
import torch.distributed as dist

__all__ = ["ddp_vit_step", "main"]


def ddp_vit_step(config=None, batch: int = 64, world: int = 32, topology: str = "trn1") -> dict:
    """The second forward + backward of ``ViTForImageClassification(config)`` (ViT-B/16 by default) under DDP."""
    from torch.nn.parallel import DistributedDataParallel
    from transformers import ViTConfig, ViTForImageClassification

    import workbench as wb
    from workbench.distributed import fake_world

    config = config or ViTConfig()
    fake_world(world, topology=topology)
    try:
        started = time.perf_counter()
        with torch.device("neuron"), torch.neuron.timing_only():
            model = DistributedDataParallel(ViTForImageClassification(config))
            pixels = torch.randn(batch, config.num_channels, config.image_size, config.image_size)
            labels = torch.randint(0, 2, (batch,))
        built = time.perf_counter()
        # Two steps: DDP rebuilds its gradient buckets in the order the first backward produced
        # them (13 all-reduces for ViT-B/16 instead of the first step's one); the second is the steady state.
        for _ in range(2):
            with wb.profile() as prof:
                model(pixel_values=pixels, labels=labels).loss.backward()
        stepped = time.perf_counter()
        collectives = sum(1 for op in prof.trace.ops if op.name == "collective::all_reduce")
        return {"build_s": built - started, "step_s": (stepped - built) / 2, "simulated_s": prof.summary["total_time"],
                "all_reduces": collectives, "summary": prof.summary}
    finally:
        dist.destroy_process_group()


def main() -> None:
    import workbench  # noqa: F401  (registers the device)

    r = ddp_vit_step()
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"ViT-B/16 batch 64 per rank, DDP on a 32-rank fake world (trn1.32xlarge), timing-only: "
          f"host {r['build_s']:.1f} s to build, {r['step_s']:.1f} s a step; peak host RSS {peak_gib:.2f} GiB; "
          f"simulated step {r['simulated_s'] * 1e3:.1f} ms with {r['all_reduces']} bucket all-reduces")


if __name__ == "__main__":
    main()
