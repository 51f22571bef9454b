"""GEMM geometry of matmul-like records, and the package's import purity."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backend.sim.flops import op_flops
from backend.sim.gpu import GemmShape, gemm_shape
from gpu_records import T, rec


@pytest.mark.parametrize("record, shape", [
    (rec("aten::mm", [T(4, 8), T(8, 16)], [T(4, 16)]), GemmShape(4, 16, 8)),
    (rec("aten::addmm", [T(16), T(4, 8), T(8, 16)], [T(4, 16)]), GemmShape(4, 16, 8)),
    (rec("aten::bmm", [T(3, 4, 8), T(3, 8, 16)], [T(3, 4, 16)]), GemmShape(4, 16, 8, 3)),
    (rec("aten::baddbmm", [T(3, 4, 16), T(3, 4, 8), T(3, 8, 16)], [T(3, 4, 16)]), GemmShape(4, 16, 8, 3)),
    (rec("aten::addbmm", [T(4, 16), T(3, 4, 8), T(3, 8, 16)], [T(4, 16)]), GemmShape(4, 16, 8, 3)),
    (rec("aten::linear", [T(2, 5, 8), T(16, 8), T(16)], [T(2, 5, 16)]), GemmShape(10, 16, 8)),
    (rec("aten::mv", [T(4, 8), T(8)], [T(4)]), GemmShape(4, 1, 8)),
    (rec("aten::dot", [T(8), T(8)], [T()]), GemmShape(1, 1, 8)),
    (rec("aten::convolution", [T(2, 3, 8, 8), T(8, 3, 3, 3)], [T(2, 8, 8, 8)], attrs={"groups": 1}),
     GemmShape(128, 8, 27)),
    (rec("aten::convolution", [T(2, 8, 8, 8), T(8, 2, 3, 3)], [T(2, 8, 8, 8)], attrs={"groups": 4}),
     GemmShape(128, 2, 18, 4)),
])
def test_gemm_shape_matches_the_flop_count(record, shape):
    assert gemm_shape(record) == shape
    assert shape.flops == op_flops(record)


def test_attention_is_two_products_per_gemm_equivalent():
    q = T(2, 4, 256, 64)
    record = rec("aten::_scaled_dot_product_flash_attention", [q, q, q], [q])
    assert gemm_shape(record) == GemmShape(256, 64, 256, 8)
    assert op_flops(record) == 2 * gemm_shape(record).flops
    backward = rec("aten::_scaled_dot_product_flash_attention_backward", [q, q, q, q], [q, q, q])
    assert gemm_shape(backward) == GemmShape(256, 64, 256, 8)


def test_unknown_geometry_is_none():
    grad = T(2, 8, 8, 8)
    assert gemm_shape(rec("aten::convolution_backward", [grad, grad, T(8, 8, 3, 3)], [grad])) is None
    assert gemm_shape(rec("aten::relu", [grad], [grad])) is None


def test_gpu_model_imports_no_torch_or_notebook_stack():
    code = ("import sys, backend.sim.gpu, benchmarks.gpu_gemm; "
            "bad = [m for m in ('torch', 'IPython', 'plotly', 'ipywidgets') if m in sys.modules]; "
            "sys.exit(', '.join(bad) or None)")
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stderr
