"""The published NKI tutorials' kernels, as written, give the values of their PyTorch/numpy
references (each tutorial's own accuracy check)."""
import numpy as np
import pytest
import torch

from backend.nki.dtypes import quantize
from benchmarks.fidelity.nki_tutorials import mamba, matmul, norms


@pytest.mark.parametrize("kernel, k, m, n", [
    (matmul.nki_matmul_basic_, 128, 64, 512),
    (matmul.nki_matmul_tiled_, 256, 256, 1024),
    (matmul.nki_matmul_hoist_load_, 256, 256, 1024),
    (matmul.nki_matmul_block_free_dimension_, 256, 256, 2048),
])
def test_matmul_tutorial_variants(kernel, k, m, n, rng):
    lhsT = quantize(rng.standard_normal((k, m)), "bfloat16")
    rhs = quantize(rng.standard_normal((k, n)), "bfloat16")
    out = kernel(lhsT, rhs)
    np.testing.assert_allclose(out, lhsT.T @ rhs, rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_matmul_fully_optimised(rng):
    lhsT = rng.standard_normal((1024, 2048)).astype(np.float32)
    rhs = rng.standard_normal((1024, 1024)).astype(np.float32)
    out = matmul.nki_matmul_fully_optimized_(lhsT, rhs)
    np.testing.assert_allclose(out, lhsT.T @ rhs, rtol=1e-3, atol=1e-2)


def _mamba_reference(delta, u, A, B, C):
    """The tutorial's mamba_torch.py reference: exp(delta A), delta u B, a scan over seq, C, sum over state."""
    delta, u, A, B, C = map(torch.from_numpy, (delta, u, A, B, C))
    dA = torch.exp(delta[:, :, None, :] * A[None, :, :, None])
    dBu = delta[:, :, None, :] * u[:, :, None, :] * B[:, None, :, :]
    scan = torch.zeros_like(dA)
    state = torch.zeros_like(dA[..., 0])
    for i in range(dA.shape[-1]):
        state = dA[..., i] * state + dBu[..., i]
        scan[..., i] = state
    return (scan * C[:, None, :, :]).sum(dim=2).numpy()


@pytest.mark.parametrize("kernel, seq", [(mamba.mamba_v1, 512), (mamba.mamba_v2, 512), (mamba.mamba_v3, 1024)])
def test_fused_mamba_kernels(kernel, seq, rng):
    channels, state = 256, 4
    delta = rng.random((1, channels, seq)).astype(np.float32)
    u = rng.random((1, channels, seq)).astype(np.float32)
    A = -rng.random((channels, state)).astype(np.float32)
    B = rng.random((1, state, seq)).astype(np.float32)
    C = rng.random((1, state, seq)).astype(np.float32)
    np.testing.assert_allclose(kernel(delta, u, A, B, C), _mamba_reference(delta, u, A, B, C), rtol=1e-4, atol=1e-4)


def test_rmsnorm_tutorial_with_a_partial_last_tile(rng):
    a = rng.random((250, 512)).astype(np.float32)           # the tutorial's torch example: 250 rows
    g = rng.random(512).astype(np.float32)
    out = norms.nki_rmsnorm_kernel(a, g)
    ta, tg = torch.from_numpy(a), torch.from_numpy(g)
    expected = ta * torch.rsqrt(ta.pow(2).mean(dim=1, keepdim=True)) * tg
    np.testing.assert_allclose(out, expected.numpy(), atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("kernel", [norms.nki_layernorm_kernel_v1, norms.nki_layernorm_kernel_v2])
def test_layernorm_tutorial(kernel, rng):
    x = rng.random((300, 1024)).astype(np.float32)
    gamma, beta = rng.random(1024).astype(np.float32), rng.random(1024).astype(np.float32)
    out = kernel(x, 1e-5, gamma, beta)
    expected = torch.nn.functional.layer_norm(torch.from_numpy(x), (1024,), torch.from_numpy(gamma),
                                              torch.from_numpy(beta), eps=1e-5)
    np.testing.assert_allclose(out, expected.numpy(), atol=1e-4, rtol=1e-3)
