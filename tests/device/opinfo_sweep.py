"""Differential sweep of PyTorch's OpInfo database: every op on ``neuron`` against CPU.

Three modes: ``fp32`` forward, ``grad`` (fp32 gradients of the outputs' sum), ``bf16`` forward.
Each op family (one OpInfo entry, all modes) runs in a worker of a ``multiprocessing.Pool``
whose workers are recycled (``maxtasksperchild``); a worker that aborts or segfaults loses
only its task, which the parent reports as a crash when the task's result never comes.

Run:  python tests/device/opinfo_sweep.py [--ops NAME ...] [--samples N] [--json PATH]
      (``make opinfo``). Prints the match rate per mode, the crash count, and every miss that
      is not in ``opinfo_expected_failures.EXPECTED_FAILURES``.
"""
from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import sys
from collections import Counter
from dataclasses import asdict, dataclass

import torch

from backend.device.tensor import unwrap_to_host

MODES = ("fp32", "grad", "bf16")
DEVICE = "neuron"
SAMPLES_PER_OP = 6
TASK_TIMEOUT_S = 120
log = logging.getLogger("opinfo_sweep")


@dataclass
class Outcome:
    op: str           # OpInfo full name ("name" or "name.variant")
    mode: str
    matched: int      # samples equal to CPU
    total: int        # samples CPU could run
    status: str       # "match" | "mismatch" | "error" | "crash" | "skip"
    reason: str = ""


def full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _op_db() -> dict:
    from torch.testing._internal.common_methods_invocations import op_db

    return {full_name(op): op for op in op_db}


def _to_cpu(value):
    # Samples are built on the device (as PyTorch's device tests do: views keep their base,
    # index tensors an op wants on CPU stay there); CPU gets copies with the same values.
    if isinstance(value, torch.Tensor):
        if value.device.type == DEVICE and value.layout == torch.strided:
            # Keep the whole storage and the view's place in it (as_strided reads outside views).
            host = unwrap_to_host(value.detach())
            copy = torch.empty(0, dtype=value.dtype).set_(
                host.untyped_storage().clone(), host.storage_offset(), host.size(), host.stride())
            return copy.requires_grad_(value.requires_grad)
        return value.detach().cpu().requires_grad_(value.requires_grad)
    return value


def _to_host(value):
    # The host tensor itself, not a .cpu() copy: a copy would not keep overlapping strides.
    return unwrap_to_host(value.detach()) if isinstance(value, torch.Tensor) else value


def _leaves(sample) -> list:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves([sample.input, sample.args, sample.kwargs])
            if isinstance(t, torch.Tensor) and t.requires_grad]


def _grads(op, sample) -> list:
    from torch.utils._pytree import tree_leaves

    outputs = [o for o in tree_leaves(op(sample.input, *sample.args, **sample.kwargs))
               if isinstance(o, torch.Tensor) and o.requires_grad]
    inputs = _leaves(sample)
    if not outputs or not inputs:
        return []
    loss = sum((o.real if o.is_complex() else o).sum() for o in outputs)
    return list(torch.autograd.grad(loss, inputs, allow_unused=True))


def _run(op, sample, mode):
    torch.manual_seed(0)   # the device draws from the CPU generator: random ops agree too
    if mode == "grad":
        return _grads(op, sample)
    return op(sample.input, *sample.args, **sample.kwargs)


# Factories of uninitialized memory: only shape, dtype and strides are comparable.
UNINITIALIZED_OUTPUT_OPS = frozenset({
    "empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided",
})


def _compare_values(actual, expected) -> None:
    torch.testing.assert_close(actual, expected, equal_nan=True, check_device=False)


def _compare_metadata(actual, expected) -> None:
    from torch.utils._pytree import tree_leaves

    for a, e in zip(tree_leaves(actual), tree_leaves(expected), strict=True):
        if (a.shape, a.dtype, a.stride()) != (e.shape, e.dtype, e.stride()):
            raise AssertionError(f"metadata differs: {(a.shape, a.dtype, a.stride())} vs {(e.shape, e.dtype, e.stride())}")


def check(op, mode: str, max_samples: int = SAMPLES_PER_OP) -> Outcome:
    """Compare ``op`` on the device with CPU for the first ``max_samples`` samples of ``mode``."""
    from torch.utils._pytree import tree_map

    name = full_name(op)
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    if dtype not in op.supported_dtypes("cpu") or (mode == "grad" and not op.supports_autograd):
        return Outcome(name, mode, 0, 0, "skip", "dtype or autograd not supported on CPU")
    samples = []
    try:
        torch.manual_seed(0)
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=mode == "grad"))[:max_samples]
        torch.manual_seed(0)
        device_samples = list(op.sample_inputs(DEVICE, dtype, requires_grad=mode == "grad"))[:max_samples]
    except Exception as exc:
        if not samples:   # the OpInfo's own CPU sample generator failed: not a device issue
            return Outcome(name, mode, 0, 0, "skip", f"sample_inputs: {exc!r}"[:200])
        return Outcome(name, mode, 0, len(samples), "error", f"sample_inputs on {DEVICE}: {exc!r}"[:200])
    compare = _compare_metadata if name in UNINITIALIZED_OUTPUT_OPS else _compare_values
    matched = total = 0
    first_miss = None
    for sample in device_samples:
        try:
            expected = tree_map(_to_host, _run(op, sample.transform(_to_cpu), mode))
        except Exception:
            continue   # CPU rejects the sample too
        total += 1
        try:
            actual = tree_map(_to_host, _run(op, sample, mode))
            compare(actual, expected)
            matched += 1
        except Exception as exc:
            if first_miss is None:
                kind = "mismatch" if isinstance(exc, AssertionError) else "error"
                first_miss = (kind, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"[:200])
    if first_miss is None:
        return Outcome(name, mode, matched, total, "match" if total else "skip")
    return Outcome(name, mode, matched, total, *first_miss)


def check_family(name: str, max_samples: int) -> list[dict]:
    """All modes of one OpInfo entry (the unit a worker crash can lose)."""
    import warnings

    import workbench  # noqa: F401  (registers the device in the worker)

    warnings.simplefilter("ignore")
    if not _OPS:   # loaded here, not in a Pool initializer: an initializer that fails respawns forever
        _OPS.update(_op_db())
    op = _OPS[name]
    return [asdict(check(op, mode, max_samples)) for mode in MODES]


_OPS: dict = {}   # per worker process


def sweep(names: list[str], max_samples: int, processes: int) -> list[Outcome]:
    outcomes = []
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes, maxtasksperchild=25) as pool:
        pending = [(name, pool.apply_async(check_family, (name, max_samples))) for name in names]
        for name, result in pending:
            try:
                outcomes += [Outcome(**row) for row in result.get(TASK_TIMEOUT_S)]
            except multiprocessing.TimeoutError:
                # The worker died (abort, segfault) or hung: the pool replaces it; we record it.
                outcomes += [Outcome(name, mode, 0, 1, "crash", "worker died or hung") for mode in MODES]
            except Exception as exc:
                outcomes += [Outcome(name, mode, 0, 1, "error", repr(exc)[:200]) for mode in MODES]
    return outcomes


def summarize(outcomes: list[Outcome], expected: dict) -> dict:
    """Match rate per mode (samples), crash count, and misses absent from ``expected``."""
    summary = {}
    for mode in MODES:
        rows = [o for o in outcomes if o.mode == mode and o.status != "skip"]
        matched, total = sum(o.matched for o in rows), sum(o.total for o in rows)
        ops_ok = sum(o.status == "match" for o in rows)
        summary[mode] = {"samples": total, "sample_match_pct": round(100 * matched / max(total, 1), 2),
                         "ops": len(rows), "op_match_pct": round(100 * ops_ok / max(len(rows), 1), 2)}
    summary["crashes"] = sum(o.status == "crash" for o in outcomes)
    summary["status_counts"] = dict(Counter(o.status for o in outcomes))
    summary["unexpected"] = [asdict(o) for o in outcomes
                             if o.status not in ("match", "skip") and (o.op, o.mode) not in expected]
    return summary


def main(argv=None) -> int:
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from opinfo_expected_failures import EXPECTED_FAILURES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="*", help="OpInfo names (default: all)")
    parser.add_argument("--samples", type=int, default=SAMPLES_PER_OP)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json", help="write every outcome here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    names = args.ops or sorted(_op_db())
    outcomes = sweep(names, args.samples, args.processes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(o) for o in outcomes], f, indent=1)
    summary = summarize(outcomes, EXPECTED_FAILURES)
    for mode in MODES:
        log.info("%-5s %s", mode, summary[mode])
    log.info("crashes: %d   statuses: %s", summary["crashes"], summary["status_counts"])
    for row in summary["unexpected"]:
        log.info("UNEXPECTED %(op)s [%(mode)s] %(status)s: %(reason)s", row)
    return 1 if summary["unexpected"] else 0


if __name__ == "__main__":
    sys.exit(main())
