"""Pipeline schedules as joined stage timelines: the bubble of GPipe and 1F1B with equal stages
is (p-1)/(m+p-1); transfers between stages show up as exposed point-to-point time."""
import pytest

from backend.sim.pipeline import PipelineAction, gpipe_order, one_f_one_b_order, simulate_pipeline


def equal_stages(p: int, forward_ns=100.0, backward_ns=200.0) -> dict:
    return {(s, k): t for s in range(p) for k, t in (("F", forward_ns), ("B", backward_ns))}


@pytest.mark.parametrize("schedule", [gpipe_order, one_f_one_b_order])
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
    timeline = simulate_pipeline(gpipe_order(p, m), equal_stages(p), p2p)
    # GPipe: the first micro-batch goes forward through p-1 hops and back through p-1 more.
    assert timeline.step_ns == pytest.approx((m + p - 1) * 300.0 + 2 * (p - 1) * hop)
    assert timeline.p2p_exposed_ns == pytest.approx(2 * (p - 1) * hop)
    # Later micro-batches' transfers hide behind the compute of the ones before them.
    assert sum(e.p2p_exposed_ns for e in timeline.events) < 2 * (p - 1) * m * hop
    assert timeline.bubble_fraction > (p - 1) / (m + p - 1)


def test_one_f_one_b_keeps_at_most_stages_minus_rank_micro_batches_in_flight():
    order = one_f_one_b_order(4, 6)
    assert [f"{a.kind}{a.microbatch}" for a in order[3]] == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3",
                                                            "F4", "B4", "F5", "B5"]
    assert [f"{a.kind}{a.microbatch}" for a in order[0]][:6] == ["F0", "F1", "F2", "F3", "B0", "F4"]
    for r, acts in order.items():
        in_flight = peak = 0
        for a in acts:
            in_flight += 1 if a.kind == "F" else -1
            peak = max(peak, in_flight)
        assert peak == 4 - r and in_flight == 0


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
