"""An FSDP2 training script in the form of pytorch/examples' distributed/FSDP2, run by torchrun.

The accelerator is whatever ``torch.accelerator`` reports (``neuron`` when torchrun runs it with
``WORKBENCH_DEVICE=neuron``, see docs/stack.md; else CPU and gloo); the model is built on the meta
device, sharded with ``fully_shard``, materialised with ``to_empty(device=...)`` and initialised
with ``reset_parameters()`` (random init of sharded DTensors, through DTensor's RNG tracker),
then trained with ``clip_grad_norm_`` and Adam, saved with the DCP full-state-dict API and
loaded back into fresh sharded models as upstream's Checkpointer does (DTensor and DCP APIs).

``--init cpu`` instead builds the model on CPU and lets ``fully_shard`` move it to the device
(``param.data = param.to(device)``); ``--init unsharded`` initialises the whole model on every
rank before sharding it (the reference: what a sharded init must reproduce).
``--mixed-precision`` and ``--explicit-prefetching`` are the upstream options.
Each rank writes its losses (and rank 0 the full state dict) under ``--out``.
"""
import argparse
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import distribute_tensor


@dataclass
class ModelArgs:
    n_layers: int = 2
    vocab_size: int = 64
    max_seq_len: int = 16
    dim: int = 32


class Block(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.norm = nn.LayerNorm(args.dim)
        self.proj = nn.Linear(args.dim, args.dim, bias=False)
        self.up = nn.Linear(args.dim, 4 * args.dim)
        self.down = nn.Linear(4 * args.dim, args.dim)

    def forward(self, x):
        h = x + self.proj(self.norm(x))
        return h + self.down(F.gelu(self.up(h)))

    def reset_parameters(self):
        for module in (self.norm, self.proj, self.up, self.down):
            module.reset_parameters()


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.pos_embeddings = nn.Embedding(args.max_seq_len, args.dim)
        self.layers = nn.ModuleList(Block(args) for _ in range(args.n_layers))
        self.norm = nn.LayerNorm(args.dim)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens) + self.pos_embeddings(torch.arange(tokens.size(1), device=tokens.device))
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).float()

    def reset_parameters(self):
        # Construction order, so the values equal a model built directly after the same seed.
        self.tok_embeddings.reset_parameters()
        self.pos_embeddings.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()
        self.norm.reset_parameters()
        self.output.reset_parameters()


def shard(model, mixed_precision: bool):
    kwargs = {}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)


def set_prefetching(model):
    layers = list(model.layers)
    for i, layer in enumerate(layers):
        if i + 1 < len(layers):
            layer.set_modules_to_forward_prefetch([layers[i + 1]])
        if i > 0:
            layer.set_modules_to_backward_prefetch([layers[i - 1]])


def reload(model, model_args, mixed_precision) -> dict[str, bool]:
    """Load the trained weights into fresh sharded meta models the two ways upstream's
    Checkpointer does (DTensor API and DCP API); whether each gets them back exactly."""
    full = {k: v.cpu() for k, v in get_model_state_dict(model, options=StateDictOptions(full_state_dict=True)).items()}
    reloaded = {}
    for api in ("dtensor", "dcp"):
        with torch.device("meta"):
            fresh = Transformer(model_args)
        shard(fresh, mixed_precision)
        if api == "dtensor":
            meta = fresh.state_dict()
            fresh.load_state_dict({k: nn.Parameter(distribute_tensor(v, meta[k].device_mesh, meta[k].placements))
                                   for k, v in full.items()}, strict=False, assign=True)
        else:
            set_model_state_dict(fresh, dict(full) if dist.get_rank() == 0 else {},
                                 options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
        reloaded[api] = all(torch.equal(p.full_tensor().cpu(), full[k]) for k, p in fresh.state_dict().items())
    return reloaded


def main(args):
    rank = int(os.environ["LOCAL_RANK"])
    if torch.accelerator.is_available():
        device = torch.device(f"{torch.accelerator.current_accelerator()}:{rank}")
        torch.accelerator.set_device_index(rank)
    else:
        device = torch.device("cpu")
    backend = dist.get_default_backend_for_device(device)
    dist.init_process_group(backend=backend, device_id=device if device.type != "cpu" else None)

    torch.manual_seed(0)
    model_args = ModelArgs()
    if args.init == "meta":
        with torch.device("meta"):
            model = Transformer(model_args)
        shard(model, args.mixed_precision)
        model.to_empty(device=device)
        model.reset_parameters()
    elif args.init == "cpu":
        model = Transformer(model_args)
        shard(model, args.mixed_precision)
    else:   # unsharded
        with torch.device("meta"):
            model = Transformer(model_args)
        model.to_empty(device=device)
        model.reset_parameters()
        shard(model, args.mixed_precision)

    if args.explicit_prefetching:
        set_prefetching(model)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):
        if args.explicit_prefetching:
            model.unshard()
        x = torch.randint(0, model_args.vocab_size, (4, model_args.max_seq_len), device=device)
        loss = model(x).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optim.step()
        optim.zero_grad()
        losses.append(loss.item())

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    result = {"losses": losses, "device": str(next(model.parameters()).device),
              "param_type": type(next(model.parameters()).to_local()).__name__,
              "reloaded": reload(model, model_args, args.mixed_precision)}
    if rank == 0:
        result["state_dict"] = full
    torch.save(result, os.path.join(args.out, f"rank{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="FSDP2 example")
    parser.add_argument("--init", choices=("meta", "cpu", "unsharded"), default="meta")
    parser.add_argument("--mixed-precision", action="store_true")
    parser.add_argument("--explicit-prefetching", action="store_true")
    parser.add_argument("--out", required=True)
    main(parser.parse_args())
