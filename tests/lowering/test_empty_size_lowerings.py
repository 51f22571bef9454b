"""Ops over tensors with a zero-size dimension lower and simulate: an op with no work costs only
its launch, an op whose outputs are made from empty inputs costs writing them (never a crash).

The op class is every registered lowering; the real-shaped records come from PyTorch's OpInfo
samples (run data-free on the device), each shrunk to zero along every size it has.
"""
import dataclasses

import pytest

from backend.lowering import EagerSession, lower, registered_lowerings
from backend.sim import OpRecord, TensorDesc, get_target

F32 = "float32"
TRN2 = get_target("trn2")


def T(*shape, dtype=F32):
    return TensorDesc(tuple(shape), dtype, None)


def rec(name, inputs, outputs, **attrs):
    return OpRecord(0, name, tuple(inputs), tuple(outputs), attrs)


@pytest.fixture(scope="module")
def session():
    """The simulator session wb.profile() feeds (one for the module: a session is not free)."""
    return EagerSession(TRN2)


def _simulated(session, record):
    """The rollup of ``record`` fed to ``session``, as wb.profile() feeds it."""
    session.feed(record)
    return session.trace.ops[-1]


def _tensor_arity(name: str) -> tuple[int, int]:
    """Tensors an op takes and returns, from its aten schema (a list argument as two)."""
    import torch

    namespace, _, op = name.partition("::")
    packet = getattr(getattr(torch.ops, namespace), op, None) if namespace == "aten" else None
    if packet is None:
        return 1, 1                   # collective::* records: one buffer in, one out
    schema = getattr(packet, packet.overloads()[0])._schema
    kinds = [str(a.type) for a in schema.arguments]
    takes = sum(2 if "Tensor[]" in k or "List[Tensor" in k else 1 for k in kinds if "Tensor" in k)
    gives = sum(1 for r in schema.returns if "Tensor" in str(r.type))
    return takes, gives


@pytest.mark.parametrize("name", sorted(registered_lowerings()))
def test_every_lowering_of_empty_tensors_costs_only_its_launch(session, name):
    """Nothing to read, compute or write: no instructions; the op pays its launch only."""
    takes, gives = _tensor_arity(name)
    record = rec(name, [T(0, 8)] * takes, [T(0, 8)] * gives)
    program = lower(record, TRN2)
    assert program.kind == "op" and not program.instructions
    op = _simulated(session, record)
    assert op.launch_overhead_ns > 0 and op.end_ns == op.start_ns


# Empty inputs, non-empty outputs: the outputs are a constant (0, the padding, NaN).
EMPTY_INNER = {
    "mm": rec("aten::mm", [T(8, 0), T(0, 16)], [T(8, 16)]),
    "linear_weight_grad": rec("aten::mm", [T(8, 0), T(0, 16)], [T(8, 16)]),
    "addmm": rec("aten::addmm", [T(16), T(8, 0), T(0, 16)], [T(8, 16)]),
    "bmm": rec("aten::bmm", [T(4, 3, 0), T(4, 0, 6)], [T(4, 3, 6)]),
    "baddbmm": rec("aten::baddbmm", [T(4, 3, 6), T(4, 3, 0), T(4, 0, 6)], [T(4, 3, 6)]),
    "mv": rec("aten::mv", [T(5, 0), T(0)], [T(5)]),
    "addmv": rec("aten::addmv", [T(5), T(5, 0), T(0)], [T(5)]),
    "dot": rec("aten::dot", [T(0), T(0)], [T()]),
    "vdot": rec("aten::vdot", [T(0), T(0)], [T()]),
    "mse_loss": rec("aten::mse_loss", [T(0), T(0)], [T()]),
    "binary_cross_entropy": rec("aten::binary_cross_entropy", [T(0), T(0)], [T()]),
    "constant_pad_nd": rec("aten::constant_pad_nd", [T(1, 1, 0, 3)], [T(1, 1, 7, 3)], pad=[0, 0, 4, 3]),
    "sum": rec("aten::sum", [T(8, 0)], [T(8)], dim=[1]),
    "embedding_bag": rec("aten::_embedding_bag_forward_only", [T(10, 0), T(0, dtype="int64"),
                                                              T(2, dtype="int64")],
                         [T(2, 0), T(0, dtype="int64"), T(2, dtype="int64"), T(2, dtype="int64")]),
}


@pytest.mark.parametrize("record", EMPTY_INNER.values(), ids=EMPTY_INNER.keys())
def test_outputs_of_empty_inputs_cost_writing_them(session, record):
    program = lower(record, TRN2)
    written = sum(t.nbytes for t in record.outputs)
    hbm_written = sum((i.traffic or {}).get("hbm_write_bytes", 0) for i in program.instructions)
    assert program.kind == "op" and hbm_written >= written > 0
    op = _simulated(session, record)
    assert op.end_ns > op.start_ns


def _shrunk(record, size):
    """``record`` with every dimension of length ``size`` made empty (a consistent shrink:
    mm [8,5]x[5,16] at 5 is the empty-inner-dimension matmul)."""
    def shrink(t):
        if size not in t.shape:
            return t
        return TensorDesc(tuple(0 if d == size else d for d in t.shape), t.dtype, None)
    return dataclasses.replace(record, inputs=tuple(map(shrink, record.inputs)),
                               outputs=tuple(map(shrink, record.outputs)))


@pytest.mark.slow
def test_opinfo_records_shrunk_to_empty_lower_and_simulate(session, opinfo_records):
    """Every lowered op the OpInfo samples reach, with each of its sizes shrunk to zero."""
    failures, fed = [], set()
    for record in opinfo_records:
        for size in {d for t in (*record.inputs, *record.outputs) for d in t.shape if d > 0}:
            shrunk = _shrunk(record, size)
            try:
                session.feed(shrunk)
            except Exception as exc:  # noqa: BLE001  (collected: every failing op is reported)
                failures.append(f"{record.name} {[t.shape for t in shrunk.inputs]}: {type(exc).__name__}: {exc}")
            fed.add(record.name)
    assert len(fed) > 200, sorted(fed)       # the sweep reached most of the lowerings
    assert not failures, "\n".join(failures[:40])


@pytest.fixture(scope="module")
def opinfo_records():
    """Up to three records per lowered op, from OpInfo samples run data-free on the device."""
    torch = pytest.importorskip("torch")
    import workbench  # noqa: F401  (registers the neuron device)
    from torch.testing._internal.common_methods_invocations import op_db

    from backend import recording

    class Sink:
        def __init__(self):
            self.records = []

        def feed(self, record):
            self.records.append(record)

    sink = Sink()
    for op in op_db:
        try:
            with torch.neuron.timing_only():
                samples = list(op.sample_inputs("neuron", torch.float32))[:3]
            with recording.recording(sink):
                for sample in samples:
                    op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001,S112  (an op the device or its meta kernels refuse: not this test's)
            continue
    lowered, per_name = registered_lowerings(), {}
    for record in sink.records:
        if record.name in lowered and not record.is_view and not record.transfer:
            per_name.setdefault(record.name, []).append(record)
    return [r for records in per_name.values() for r in records[:3]]
