"""In-place list ops (``_foreach_*_``, fused optimizers) record no outputs: the GPU model still
pays for the lists they write, and streams the same bytes as the NeuronCore lowering."""
from __future__ import annotations

import pytest

from backend.lowering import lower
from backend.sim.flops import op_read_write_bytes
from backend.sim.gpu import record_cost
from backend.sim.gpu.cost import fused_cost
from gpu_records import ROUND, T, rec

F32 = "float32"
PARAMS = [T(4, 8, dtype=F32), T(8, dtype=F32)]           # one list: 40 fp32 elements, 160 bytes
LIST = 160
STEPS = [T(dtype=F32)] * 2                               # per-tensor scalars: neither list read nor written


def adamw(**attrs):
    lists = 5 if attrs.get("amsgrad") else 4
    return rec("aten::_fused_adamw_", PARAMS * lists + STEPS, [],
               attrs={"lr": 1e-3, "amsgrad": False, **attrs})


CASES = [
    # (record, bytes read, bytes written)
    (adamw(), 4 * LIST, 3 * LIST),                                      # p, g, m, v in; p, m, v out
    (adamw(amsgrad=True), 5 * LIST, 4 * LIST),                          # ... and max_v
    (rec("aten::_fused_sgd_", PARAMS * 3, [], attrs={"momentum": 0.9}), 3 * LIST, 2 * LIST),
    (rec("aten::_fused_sgd_", PARAMS * 2, [], attrs={"momentum": 0.0}), 2 * LIST, LIST),
    (rec("aten::_foreach_add_", PARAMS * 2, []), 2 * LIST, LIST),        # List overload
    (rec("aten::_foreach_mul_", PARAMS + [T(dtype=F32)], []), LIST, LIST),   # Tensor overload
    (rec("aten::_foreach_addcmul_", PARAMS * 3, [], attrs={"value": 0.1}), 3 * LIST, LIST),
    (rec("aten::_foreach_zero_", PARAMS, []), 0, LIST),
]


@pytest.mark.parametrize("record,read,written", CASES, ids=lambda c: getattr(c, "name", None))
def test_in_place_list_ops_pay_for_the_lists_they_write(record, read, written):
    assert op_read_write_bytes(record) == (read, written)
    cost = record_cost(ROUND, record, 0.0)
    assert (cost.read_bytes, cost.write_bytes) == (read, written)


def test_fused_adamw_exact_bytes_and_memory_time():
    cost = record_cost(ROUND, adamw(), 0.0)
    assert (cost.read_bytes, cost.write_bytes) == (640, 480)
    assert fused_cost(ROUND, [adamw()], 0.0).write_bytes == 480


def test_records_that_list_outputs_keep_the_inputs_plus_outputs_rule():
    a, b = T(4, 8, dtype=F32), T(4, 8, dtype=F32)
    assert op_read_write_bytes(rec("aten::add_", [a, b], [a])) == (256, 128)     # self is the output
    out_of_place = rec("aten::_foreach_add", PARAMS * 2, PARAMS, attrs={"alpha": 1.0})
    assert op_read_write_bytes(out_of_place) == (2 * LIST, LIST)
    assert op_read_write_bytes(rec("aten::view", [a], [a], is_view=True)) == (0, 0)


def _neuron_hbm_bytes(record) -> tuple[int, int]:
    traffic = [i.traffic or {} for i in lower(record).instructions]
    return (sum(t.get("hbm_read_bytes", 0) for t in traffic),
            sum(t.get("hbm_write_bytes", 0) for t in traffic))


@pytest.mark.parametrize("record,read,written", CASES, ids=lambda c: getattr(c, "name", None))
def test_neuron_lowering_and_gpu_model_stream_the_same_bytes(record, read, written):
    cost = record_cost(ROUND, record, 0.0)
    assert _neuron_hbm_bytes(record) == (cost.read_bytes, cost.write_bytes) == (read, written)


def test_every_op_with_a_list_arity_has_a_lowering():
    from backend.lowering.foreach import FOREACH_ALU
    from backend.sim.list_ops import FOREACH_LIST_ARITY

    assert set(FOREACH_LIST_ARITY) <= set(FOREACH_ALU)


def test_min_bytes_counts_the_lists_an_in_place_op_writes():
    # the compile path's fused-kernel savings and host fallbacks use the same count
    from backend.sim.flops import op_min_bytes, op_read_write_bytes
    record = adamw()
    assert op_min_bytes(record) == sum(op_read_write_bytes(record)) == 640 + 480
