"""Ops seen before reuse their lowered program and schedule, with bit-identical traces, and
the simulator's work per op does not grow with tensor size."""
import pytest

import backend.lowering.timeline as timeline
from backend.lowering import lower, simulate
from backend.sim import assumptions
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.schedule_cache import SCHEDULES
from backend.sim.scheduler import Simulator


@pytest.fixture(autouse=True)
def _cold_cache():
    SCHEDULES.clear()
    SCHEDULES.enabled = True
    yield
    SCHEDULES.enabled = True
    SCHEDULES.clear()


def _t(*shape, dtype="bfloat16"):
    return TensorDesc(tuple(shape), dtype)


def _layer(index: int, tokens: int = 512, d: int = 1024) -> list[OpRecord]:
    """A transformer-ish layer's ops; every layer repeats the same shapes."""
    x, w = _t(tokens, d), _t(d, d)
    return [
        OpRecord(index, "aten::mm", (x, w), (x,), source=f"model.py:{index}"),
        OpRecord(index + 1, "aten::add", (x, x), (x,)),
        OpRecord(index + 2, "aten::_softmax", (_t(tokens, d, dtype="float32"),), (_t(tokens, d, dtype="float32"),),
                 {"dim": -1}),
        OpRecord(index + 3, "aten::view", (x,), (x,), is_view=True),
        OpRecord(index + 4, "aten::_to_copy", (x,), (x,), transfer="d2h"),
    ]


def _stream(layers: int = 4) -> list[OpRecord]:
    return [r for i in range(layers) for r in _layer(10 * i)]


def _rows(trace):
    return trace.to_records(), trace.event_records(), trace.summary(), trace.events_dropped


def test_cached_schedules_give_the_trace_of_scheduling_every_op_afresh():
    SCHEDULES.enabled = False
    fresh = simulate(_stream(), "trn2")
    SCHEDULES.enabled = True
    cold = simulate(_stream(), "trn2")          # later layers hit what the first one cached
    assert SCHEDULES.hits > 0
    warm = simulate(_stream(), "trn2")          # every op hits
    assert _rows(cold) == _rows(fresh) == _rows(warm)
    assert [op.source for op in warm.ops][:1] == ["model.py:0"]   # per-op fields are the record's


def test_events_past_the_cap_are_counted_not_kept_on_a_hit():
    SCHEDULES.enabled = False
    fresh = simulate(_stream(), "trn2", max_events=300)
    SCHEDULES.enabled = True
    cached = simulate(_stream(), "trn2", max_events=300)
    assert len(cached.events) == 300 and cached.events_dropped > 0
    assert _rows(cached) == _rows(fresh)


def test_an_op_seen_before_is_not_lowered_again(monkeypatch):
    calls = []
    monkeypatch.setattr(timeline, "lower", lambda record, target: calls.append(record.name) or lower(record, target))
    simulate(_stream(layers=8), "trn2")
    assert len(calls) == len(_layer(0))


def test_an_assumption_override_does_not_reuse_schedules_costed_without_it():
    base = simulate(_stream(), "trn2").total_time_ns
    with assumptions.overridden({"stream.tile_bytes_per_partition": 2048}):
        moved = simulate(_stream(), "trn2").total_time_ns
        SCHEDULES.enabled = False
        moved_fresh = simulate(_stream(), "trn2").total_time_ns
        SCHEDULES.enabled = True
    assert moved == moved_fresh != base
    assert simulate(_stream(), "trn2").total_time_ns == base


def test_each_target_has_its_own_entries():
    trn1 = simulate(_stream(), "trn1").total_time_ns
    trn2 = simulate(_stream(), "trn2").total_time_ns
    SCHEDULES.enabled = False
    assert (simulate(_stream(), "trn1").total_time_ns, simulate(_stream(), "trn2").total_time_ns) == (trn1, trn2)


@pytest.mark.parametrize("name, make", [
    ("aten::add", lambda n: ((_t(n, 4096), _t(n, 4096)), (_t(n, 4096),), {})),
    ("aten::mm", lambda n: ((_t(n, 2048), _t(2048, 4096)), (_t(n, 4096),), {})),
    ("aten::_softmax", lambda n: ((_t(n, 4096),), (_t(n, 4096),), {"dim": -1})),
    ("aten::sum", lambda n: ((_t(n, 4096),), (_t(n),), {"dim": [-1]})),
])
def test_simulator_work_per_op_does_not_grow_with_tensor_size(name, make):
    """Instructions and trace events (the simulator's work units) reach a bound as the op grows."""
    sim = Simulator("trn2")

    def work(rows):
        inputs, outputs, attrs = make(rows)
        program = lower(OpRecord(0, name, inputs, outputs, attrs), "trn2")
        return len(program.instructions), len(sim.schedule(program).events)

    large, huge = work(16384), work(16 * 16384)
    assert huge == large, f"{name}: {large} -> {huge} (instructions, events) for 16x the rows"


def test_a_model_profiled_twice_gives_identical_traces_cold_and_warm(neuron):
    import torch
    import workbench as wb

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU()) for _ in range(3)))
    model = model.to(neuron)
    x = torch.randn(64, 256, device=neuron)

    def profiled():
        model.zero_grad(set_to_none=True)         # each run starts alike: gradients are born, not added
        with wb.profile(target="trn2") as prof:
            model(x).sum().backward()
        return _rows(prof.trace)

    cold = profiled()
    hits = SCHEDULES.hits
    warm = profiled()
    assert SCHEDULES.hits > hits
    SCHEDULES.enabled = False
    assert cold == warm == profiled()
