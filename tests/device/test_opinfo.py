"""A fixed, deterministic slice of the OpInfo sweep (tests/device/opinfo_sweep.py) for CI.

The full sweep (`make opinfo`) runs every op in crash-isolated workers; this runs a few dozen
op families in-process, each in every mode, and expects each to match CPU unless it is listed
in opinfo_expected_failures.py.
"""
import pathlib
import sys

import pytest

pytest.importorskip("expecttest")   # torch.testing._internal (op_db) needs it

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import opinfo_expected_failures  # noqa: E402
import opinfo_sweep  # noqa: E402

# Families where the wrapper's view metadata, math bits and out=/resize handling matter most,
# plus common elementwise, reduction, matmul and normalization ops, and a sparse COO op.
CI_OPS = (
    "add", "mul", "div.no_rounding_mode", "sub", "abs", "exp", "tanh", "sigmoid", "where",
    "conj", "conj_physical", "resolve_conj", "resolve_neg", "view_as_real", "real", "imag",
    "narrow", "stack", "cat", "as_strided", "transpose", "permute", "expand", "unfold",
    "sum", "mean", "amax", "cumsum", "softmax", "matmul", "mm", "bmm", "addmm",
    "native_layer_norm", "nn.functional.group_norm", "nn.functional.layer_norm",
    "nn.functional.linear", "nn.functional.conv2d", "index_select", "gather", "scatter_add",
    "zeros_like", "clone", "contiguous", "resize_", "resize_as_", "to_sparse",
)


@pytest.fixture(scope="module")
def ops():
    return opinfo_sweep._op_db()


@pytest.mark.parametrize("mode", opinfo_sweep.MODES)
@pytest.mark.parametrize("name", CI_OPS)
def test_op_matches_cpu(ops, name, mode):
    outcome = opinfo_sweep.check(ops[name], mode, max_samples=4)
    reason = opinfo_expected_failures.EXPECTED_FAILURES.get((name, mode))
    if reason is not None:
        pytest.xfail(reason)
    assert outcome.status in ("match", "skip"), f"{outcome.status}: {outcome.reason}"
