"""The Mamba layer (batch 1, seq 512, channels 256, state 16) as the NKI tutorial's PyTorch
reference writes it: exp/multiply broadcasts, a sequential scan over the 512 positions, a sum
over the state axis -- run with torch on the ``neuron`` device, eagerly (unfused) or compiled.
"""
from __future__ import annotations

__all__ = ["mamba_workload"]


def _mamba_layer(delta, A, B, u, C):
    """The NKI Mamba tutorial's PyTorch reference: broadcasts, a sequential scan, a state-axis sum."""
    import torch
    delta_a = torch.exp(delta[:, :, None, :] * A[None, :, :, None])            # [b, c, s, l]
    delta_b_u = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    scan = torch.empty_like(delta_a)
    for i in range(delta_a.shape[-1]):
        prev = scan[..., i - 1] if i > 0 else 0
        scan[..., i] = delta_a[..., i] * prev + delta_b_u[..., i]
    return (C[:, None, :, :] * scan).sum(dim=-2)


def mamba_workload(target: str = "trn1", batch: int = 1, seq: int = 512, channels: int = 256, state: int = 16,
                   compiled: bool = False):
    """(workload, target config) of the Mamba layer run with torch on ``neuron``: eagerly, or
    through ``torch.compile(backend="neuron")`` (Dynamo unrolls the scan; the kept call is the
    second, after compilation)."""
    import torch
    from workbench.session import profile
    torch.manual_seed(0)
    dev = dict(device="neuron", dtype=torch.float32)
    delta, u = torch.rand(batch, channels, seq, **dev), torch.rand(batch, channels, seq, **dev)
    A = -torch.rand(channels, state, **dev)
    B, C = torch.rand(batch, state, seq, **dev), torch.rand(batch, state, seq, **dev)
    layer = _mamba_layer
    if compiled:
        torch._dynamo.reset()
        layer = torch.compile(_mamba_layer, backend="neuron")
        layer(delta, A, B, u, C)
    with profile(target=target, source=False) as prof:
        layer(delta, A, B, u, C)
    return prof.workload, prof.workload_target
