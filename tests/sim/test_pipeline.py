"""Pipeline schedules as joined stage timelines: the bubble of GPipe and 1F1B with equal stages
is (p-1)/(m+p-1); transfers between stages show up as exposed point-to-point time."""
import pytest

from backend.sim.pipeline import PipelineAction, simulate_pipeline


def gpipe(p: int, m: int) -> dict:
    return {r: [PipelineAction(r, "F", i) for i in range(m)] + [PipelineAction(r, "B", i) for i in range(m)]
            for r in range(p)}


def one_f_one_b(p: int, m: int) -> dict:
    order = {}
    for r in range(p):
        warmup = min(p - 1 - r, m)
        acts = [PipelineAction(r, "F", i) for i in range(warmup)]
        for i in range(m - warmup):
            acts += [PipelineAction(r, "F", warmup + i), PipelineAction(r, "B", i)]
        acts += [PipelineAction(r, "B", i) for i in range(m - warmup, m)]
        order[r] = acts
    return order


def equal_stages(p: int, forward_ns=100.0, backward_ns=200.0) -> dict:
    return {(s, k): t for s in range(p) for k, t in (("F", forward_ns), ("B", backward_ns))}


@pytest.mark.parametrize("schedule", [gpipe, one_f_one_b])
@pytest.mark.parametrize("p,m", [(2, 4), (4, 4), (4, 8), (8, 3)])
def test_bubble_of_equal_stages_is_the_schedule_formula(schedule, p, m):
    timeline = simulate_pipeline(schedule(p, m), equal_stages(p))
    assert timeline.step_ns == pytest.approx((m + p - 1) * 300.0)
    assert timeline.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert timeline.p2p_exposed_ns == 0.0
    assert len(timeline.events) == 2 * p * m


def test_transfers_between_stages_are_exposed_on_the_critical_path():
    p, m, hop = 4, 4, 50.0
    p2p = {(s, k): hop for s in range(p) for k in ("F", "B")}
    timeline = simulate_pipeline(gpipe(p, m), equal_stages(p), p2p)
    # GPipe: the first micro-batch goes forward through p-1 hops and back through p-1 more.
    assert timeline.step_ns == pytest.approx((m + p - 1) * 300.0 + 2 * (p - 1) * hop)
    assert timeline.p2p_exposed_ns == pytest.approx(2 * (p - 1) * hop)
    # Later micro-batches' transfers hide behind the compute of the ones before them.
    assert sum(e.p2p_exposed_ns for e in timeline.events) < 2 * (p - 1) * m * hop
    assert timeline.bubble_fraction > (p - 1) / (m + p - 1)


def test_a_deadlocking_order_is_an_error():
    order = {0: [PipelineAction(0, "B", 0), PipelineAction(0, "F", 0)], 1: [PipelineAction(1, "F", 0),
                                                                               PipelineAction(1, "B", 0)]}
    with pytest.raises(ValueError, match="deadlocks"):
        simulate_pipeline(order, equal_stages(2))


def test_split_backward_weights_wait_for_their_input_gradients():
    order = {0: [PipelineAction(0, "F", 0), PipelineAction(0, "I", 0), PipelineAction(0, "W", 0)],
             1: [PipelineAction(1, "F", 0), PipelineAction(1, "I", 0), PipelineAction(1, "W", 0)]}
    costs = {(s, k): 10.0 for s in range(2) for k in "FIW"}
    timeline = simulate_pipeline(order, costs)
    by = {(e.stage, e.kind): e for e in timeline.events}
    assert by[(0, "I")].start_ns == by[(1, "I")].end_ns == 30.0
    assert by[(0, "W")].start_ns == by[(0, "I")].end_ns
    assert timeline.step_ns == 50.0
