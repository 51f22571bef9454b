"""The migration report lists a model's custom GPU code (custom torch.ops namespaces, C++/CUDA
extensions, Triton kernels) as blockers, with their share of the GPU step and what a port needs."""
import torch
from torch import nn

import workbench as wb
from workbench.migration.custom_code import _referenced


@torch.library.custom_op("wbtest_ext::fused_gelu", mutates_args=())
def fused_gelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x)


@fused_gelu.register_fake
def _(x):
    return torch.empty_like(x)


class ExtensionNorm(nn.Module):
    """Calls a CUDA extension when installed, PyTorch otherwise (as apex-style models do)."""

    def forward(self, x):
        try:
            import wbtest_fused_rmsnorm_cuda  # noqa: F401  (not installed anywhere)
        except ImportError:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj, self.norm = nn.Linear(64, 64), ExtensionNorm()

    def forward(self, x):
        return self.norm(torch.ops.wbtest_ext.fused_gelu(self.proj(x)))


def test_custom_op_and_extension_are_blockers_with_their_gpu_share():
    report = wb.migration_report(Block(), torch.randn(8, 64), training=False, compile=False)
    table = report.custom_code.set_index("kind")
    op = table.loc["custom op"]
    assert op["name"] == "wbtest_ext::fused_gelu" and op["calls"] == 1 and 0 < op["gpu_step_percent"] < 100
    ext = table.loc["C++/CUDA extension"]
    assert ext["name"].startswith("wbtest_fused_rmsnorm_cuda (not installed")
    assert ext["where"] == "ExtensionNorm.forward (norm)" and 0 < ext["gpu_step_percent"] < 100
    assert "NKI" in op["nki_port"]
    line = next(f for f in report.findings if f.startswith("custom code"))
    assert "2 blocker(s)" in line and "wbtest_ext::fused_gelu" in line
    assert "custom_code" in report.to_frames()


def test_nki_kernels_and_plain_models_have_no_blockers():
    report = wb.migration_report(nn.Sequential(nn.Linear(16, 16), nn.ReLU()), torch.randn(4, 16),
                                 training=False, compile=False)
    assert report.custom_code.empty
    assert not any(f.startswith("custom code") for f in report.findings)


def test_triton_kernel_objects_are_found_in_forward():
    # Triton is not installed here: a stand-in with the class identity of triton's JITFunction.
    JITFunction = type("JITFunction", (), {"__module__": "triton.runtime.jit"})
    kernel = JITFunction()
    kernel.fn = lambda: None
    kernel.fn.__name__ = "add_kernel"

    namespace = {"add_kernel": kernel}
    exec("def forward(self, x):\n    add_kernel[(1,)](x)\n    return x\n", namespace)
    assert _referenced(namespace["forward"]) == [("Triton kernel", "add_kernel")]
