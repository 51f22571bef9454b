"""A kernel that runs the tutorial notebooks with this interpreter."""
from __future__ import annotations

import pytest

__all__ = []


@pytest.fixture(scope="session")
def kernel_name() -> str:
    """``python3``: jupyter_client runs its native kernel with ``sys.executable`` (the venv)."""
    pytest.importorskip("ipykernel")
    from jupyter_client.kernelspec import NATIVE_KERNEL_NAME, KernelSpecManager

    KernelSpecManager().get_kernel_spec(NATIVE_KERNEL_NAME)   # raises NoSuchKernel if unusable
    return NATIVE_KERNEL_NAME
