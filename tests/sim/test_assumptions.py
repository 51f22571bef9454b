"""The assumption registry: every time-affecting constant of the cost path is registered or cited,
ranges are sane, overrides reach the formulas and planners, and nothing moves at the defaults."""
import ast
from pathlib import Path

import pytest

from backend.lowering.gemm import TensorEngineGemm, plan_blocked_gemm
from backend.sim import assumptions, get_target
from backend.sim.costs import instruction_ns
from backend.sim.ir import Instruction

ROOT = Path(__file__).resolve().parents[2]
# The cost path: lowering (every op family) and the NeuronCore cost formulas and scheduler.
COST_PATH = [*sorted((ROOT / "backend/lowering").rglob("*.py")), *sorted((ROOT / "backend/sim/costs").glob("*.py")),
             ROOT / "backend/sim/scheduler.py"]
# Module-level numbers in the cost path that are facts, not modelling choices, each with why.
FACTS = {
    ("data.py", "TRANSPOSE_BLOCK"): "the 128x128 PE array",
    ("reductions.py", "BN_STATS_FMAX"): "ISA: bn_stats reads at most 512 elements per partition",
    ("sorting.py", "MAX8_FREE_MAX"): "ISA: max8 reads at most 16384 elements per partition",
    ("sorting.py", "_INDEX_BYTES"): "indices are int32 on chip",
    ("planner.py", "_PICKS_MAX"): "size of a memo of plans; never changes a time",
    ("kernel.py", "_AT_START"): "a marker id for values already in SBUF; never a cost",
    ("stream.py", "STREAM_BUFS"): "double buffering, as the NKI tutorials' tile pipelines allocate (bufs=2)",
}


def _numeric(node) -> bool:
    """A literal number or arithmetic on literal numbers (``8 * 1024``)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _numeric(node.left) and _numeric(node.right)
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand)
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and all(_numeric(e) for e in node.elts)
    return False


def _module_numbers(path: Path) -> list[str]:
    names = []
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        for target in targets:
            if isinstance(target, ast.Name) and value is not None and _numeric(value):
                names.append(target.id)
    return names


def test_cost_path_has_no_unlabelled_module_constant():
    unlabelled = [f"{p.relative_to(ROOT)}:{name}" for p in COST_PATH for name in _module_numbers(p)
                  if (p.name, name) not in FACTS]
    assert unlabelled == [], ("register these in backend/sim/assumptions.py (with a plausible range) "
                              "or list them as FACTS with a citation")


def test_the_walker_sees_a_bare_constant(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("TILE = 8 * 1024\nNAMES = ('a',)\nFLAG = True\ndef f():\n    X = 3\n")
    assert _module_numbers(f) == ["TILE"]


def test_every_assumption_has_a_range_or_a_citation():
    assert len(assumptions.registered()) >= 15
    for a in assumptions.registered():
        assert a.unit and a.why, a.name
        if a.is_assumption:
            low, high = a.plausible
            assert low <= a.value <= high and low < high, a.name
            if a.integer:
                assert all(float(v).is_integer() for v in (a.value, low, high)), a.name
        else:
            assert a.plausible is None and "ISA" in a.source, a.name


def test_every_assumption_is_read_by_the_cost_path():
    source = "\n".join(p.read_text() for p in COST_PATH)
    unread = [a.name for a in assumptions.registered() if f'"{a.name}"' not in source]
    assert unread == []


def test_an_assumption_needs_a_range_inside_which_its_value_lies():
    with pytest.raises(TypeError, match="plausible"):
        assumptions.Assumption("x", 1, "B", assumptions.ASSUMPTION + ": guess", "why")
    with pytest.raises(ValueError, match="outside"):
        assumptions.Assumption("x", 9, "B", assumptions.ASSUMPTION + ": guess", "why", (1, 2))


def test_overrides_are_checked_and_undone():
    with pytest.raises(KeyError, match="unknown assumption"):
        with assumptions.overridden({"no.such": 1}):
            pass
    with pytest.raises(ValueError, match="whole number"):
        with assumptions.overridden({"gemm.max_k_steps": 2.5}):
            pass
    with assumptions.overridden({"gemm.max_k_steps": 4}):
        assert assumptions.value("gemm.max_k_steps") == 4
    assert assumptions.value("gemm.max_k_steps") == 8


def test_matmul_access_overhead_share_exact():
    # trn1 nc_matmul, stationary 128, moving 512, bf16: (max(min(64, 128), 512) + share * 60) / 2.8 GHz
    trn1 = get_target("trn1")
    mm = Instruction("tensor", "nc_matmul", partitions=128, free_size=512, stationary_free=128, dtype="bfloat16")
    assert instruction_ns(mm, trn1) == pytest.approx((512 + 60) / 2.8, rel=1e-12)
    with assumptions.overridden({"tensor.matmul_access_overhead_share": 0.0}):
        assert instruction_ns(mm, trn1) == pytest.approx(512 / 2.8, rel=1e-12)
    with assumptions.overridden({"tensor.matmul_access_overhead_share": 0.5}):
        assert instruction_ns(mm, trn1) == pytest.approx(542 / 2.8, rel=1e-12)


def test_gpsimd_start_cycles_exact():
    trn2 = get_target("trn2")
    iota = Instruction("gpsimd", "iota", free_size=100)
    # max(MIN_II 64, 150 + 100) + 60 access cycles at 1.2 GHz
    assert instruction_ns(iota, trn2) == pytest.approx(310 / 1.2, rel=1e-12)


def test_cached_gemm_plans_follow_an_override():
    shape = TensorEngineGemm(1, 4096, 8192, 8192, "bfloat16", "bfloat16", a_transposed=False)
    trn1 = get_target("trn1")
    default = plan_blocked_gemm(shape, trn1)
    with assumptions.overridden({"gemm.sbuf_budget_fraction": 0.2}):
        tight = plan_blocked_gemm(shape, trn1)
        assert tight.sbuf_bytes <= 0.2 * trn1.sbuf_usable_bytes < default.sbuf_bytes
    assert plan_blocked_gemm(shape, trn1) == default


def test_attention_lowers_at_both_ends_of_every_attention_assumption():
    """A sensitivity pass moves each assumption to its range ends: the lowering must accept them."""
    from backend.lowering.eager import lower
    from backend.sim import assumptions
    from backend.sim.descriptors import OpRecord, TensorDesc
    from backend.sim.presets import get_target

    q = TensorDesc((1, 16, 256, 64), "bfloat16", None)
    record = OpRecord(index=0, name="aten::_scaled_dot_product_flash_attention_for_cpu",
                      inputs=(q, q, q), outputs=(q,))
    knobs = {a.name: a for a in assumptions.registered()}
    for name in ("attention.psum_buffers", "attention.head_groups"):
        for value in knobs[name].plausible:
            with assumptions.overridden({name: value}):
                assert lower(record, get_target("trn2")).instructions
