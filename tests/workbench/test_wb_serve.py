"""wb.serve end to end on a tiny Llama (Hugging Face config, built timing-only) on trn2 and h100:
iteration costs from the real model, KV capacity from memory, prices, and the interpolation check."""
import math

import pytest
import torch
from transformers import LlamaConfig

import workbench as wb
from backend.sim.collectives import collective_cost
from backend.sim.pricing import price
from backend.sim.serving import Iteration
from workbench.serving.iteration_costs import IterationCosts
from workbench.serving.kv_slots import slot_cache
from workbench.serving.model_shapes import build_timing_only, shard_config
from workbench.serving.model_shapes import model_shape
from workbench.serving.service import activation_bytes, iteration_costs

TINY = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                   num_attention_heads=8, num_key_value_heads=4)
OPTIONS = {"max_num_seqs": 4, "max_num_batched_tokens": 64}
EAGER = {"compiled": False}     # the scheduler and accounting tests: eager measurement is quicker to build


@pytest.fixture(scope="module")
def requests():
    return wb.serving.poisson_requests(40.0, 30, prompt_tokens=(16, 60), output_tokens=(2, 20), seed=1)


@pytest.mark.parametrize("target", ["trn2", "h100"])
def test_serve_tiny_llama(target, requests):
    result = wb.serve(TINY, requests, target=target, tp=2, replicas=2, slo={"ttft_s": 1.0, "tpot_s": 1.0},
                      **OPTIONS, **EAGER)
    s = result.summary
    assert (s["completed"], s["rejected"], len(result.requests)) == (30, 0, 30)
    assert s["goodput_requests_per_s"] == s["requests_per_s"] > 0          # a generous SLO: every request
    for key in ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "itl_p99_s", "throughput_tokens_per_s",
                "usd_per_1m_tokens"):
        assert math.isfinite(s[key]) and s[key] > 0, key
    assert set(result.requests["replica"]) == {0, 1}
    timeline = result.timeline
    assert (timeline["kv_blocks_used"] <= timeline["kv_blocks_total"]).all()
    assert (timeline["batch_size"] <= OPTIONS["max_num_seqs"]).all()
    assert (timeline["prefill_tokens"] + timeline["decode_tokens"] <= OPTIONS["max_num_batched_tokens"]).all()
    # the first request meets an idle replica: its TTFT is the model's prefill of its prompt
    costs = iteration_costs(TINY, target, 2, _config(result), **EAGER)
    first = result.requests.iloc[0]
    assert first["ttft_s"] == pytest.approx(costs(Iteration(((int(first["prompt_tokens"]), 0),))))
    usd = price(target).usd_per_device_hour * 4 * s["duration_s"] / 3600
    assert s["usd_per_1m_tokens"] == pytest.approx(usd / s["output_tokens"] * 1e6)
    assert (result.interpolation["error_percent"].abs() < 10).all()
    assert set(result.figures()) == {"latency_cdf", "kv_occupancy"}


def _config(result):
    from backend.sim.serving import SchedulerConfig
    return SchedulerConfig(max_model_len=256, **OPTIONS)


def test_kv_cache_gets_memory_minus_weights_and_activations(requests):
    result = wb.serve(TINY, requests[:3], target="h100", tp=2, check=False, **OPTIONS, **EAGER)
    shape = model_shape(TINY)
    free = (wb.target("h100").hbm_bytes * 0.9 - shape.num_params * 2 / 2
            - activation_bytes(shape, 2, 64, 4))
    per_block = 16 * 2 * 4 * (4 // 2) * 32 * 2          # block x (K, V) x layers x KV heads here x head_dim x bf16
    assert result.summary["num_gpu_blocks"] == int(free // per_block)


def test_layers_extrapolate_and_tp_adds_two_all_reduces_per_layer():
    costs = IterationCosts(TINY, "trn2", tp=2, max_num_seqs=2, token_budget=32, max_model_len=64, **EAGER)
    whole = build_timing_only(shard_config(TINY, 2))                  # all 4 layers of one device's share
    costs._models[4] = whole            # measured directly beside the 1- and 2-layer builds
    direct = costs._forward_s(4, 2, 20, 1)
    allreduce = 2 * 4 * collective_cost("all_reduce", 2 * 256 * 2, 2, costs.topology).time_ns * 1e-9
    assert costs.allreduce_s(2) == pytest.approx(allreduce) and allreduce > 0
    assert costs.decode_direct(2, 21) == pytest.approx(direct + allreduce, rel=1e-6)


def test_serve_needs_a_causal_lm_config():
    with pytest.raises(TypeError, match="needs a Hugging Face causal LM or its config"):
        wb.serve(torch.nn.Linear(4, 4), [(0.0, 4, 4)], target="trn2")


@pytest.mark.parametrize("new", [1, 8])
def test_measured_attention_reads_the_cache_once_per_kv_head(new):
    """A decode step and a prefill chunk over the slot cache, as measured: Hugging Face's SDPA
    attention takes the device's fused grouped-query op (K/V unrepeated), not the math path."""
    model = build_timing_only(TINY)
    with torch.neuron.timing_only():
        cache = slot_cache(model.config, 2, 40 if new == 1 else 0, new, torch.bfloat16)
        ids = torch.zeros(2, new, dtype=torch.long, device="neuron")
    with torch.no_grad(), wb.profile(timing_only=True) as prof:
        model(ids, past_key_values=cache, logits_to_keep=1)
    names = list(prof.ops["name"])
    assert names.count("aten::_scaled_dot_product_fused_attention_overrideable") == TINY.num_hidden_layers
    assert not {"aten::_softmax", "aten::_safe_softmax", "aten::bmm", "aten::clone"} & set(names)


def test_static_kv_cache_reads_whole_slots_and_caps_the_batch_at_the_slots_that_fit(requests):
    from backend.sim.serving import Request
    burst = [Request(i, 0.0, 32, 8) for i in range(12)]
    # 100 blocks of 16 tokens hold 6 slots of max_model_len 256
    result = wb.serve(TINY, burst, target="h100", tp=2, check=False, kv_cache="static", num_gpu_blocks=100,
                      max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256)
    s, timeline = result.summary, result.timeline
    assert (s["kv_cache"], s["max_num_seqs"], s["completed"]) == ("static", 6, 12)
    assert timeline["batch_size"].max() == 6
    costs = iteration_costs(TINY, "h100", 2, _config(result).__class__(max_model_len=256, max_num_seqs=8,
                                                                       max_num_batched_tokens=64))
    decodes = timeline[timeline.prefill_tokens == 0]
    for batch, seconds in zip(decodes["decode_tokens"], decodes["duration_s"]):
        assert seconds == pytest.approx(costs(Iteration((), (256,) * batch)))
    with pytest.raises(ValueError, match="kv_cache must be 'paged' or 'static'"):
        wb.serve(TINY, requests, target="h100", kv_cache="dense")


def _small_grid(target: str, compiled: bool) -> IterationCosts:
    """Prefill of 16 tokens, decode of one sequence at 16, 32 and 64 tokens of context."""
    return IterationCosts(TINY, target, max_num_seqs=1, token_budget=16, max_model_len=64, compiled=compiled)


@pytest.mark.parametrize("target", ["trn2", "h100"])
def test_compiled_iteration_has_weights_laid_out_and_beats_eager(target):
    """A compiled decode step, as a serving engine runs it: no weight relayouts (done once, at the
    compile call before the timed one); it costs less than the eager op stream."""
    from workbench.session import ProfileSession
    compiled, eager = _small_grid(target, True), _small_grid(target, False)
    assert compiled.decode_direct(1, 32) < eager.decode_direct(1, 32)
    with torch.no_grad():                  # as measured: this shape is compiled and warm now
        ops = compiled._profiled(1, 1, 31, 1).ops
    assert not ops["name"].str.startswith("layout_").any()
    compiled.release()
    eager.release()


@pytest.mark.slow
def test_compiled_grid_traces_a_few_symbolic_graphs_and_costs_each_shape_as_a_static_compile():
    """The grid's compiled measurements trace the forward once per specialisation (batch 1, one new
    token), not once per shape, past Dynamo's recompile limit of eight, and every shape costs
    exactly what a static graph of that shape costs; interpolation still matches direct simulation."""
    from backend.compile import compiled_graphs
    torch._dynamo.reset()           # graphs an earlier test compiled would be reused, not compiled
    before = len(compiled_graphs())
    grid = dict(max_num_seqs=16, token_budget=64, max_model_len=64, compiled=True)
    costs = IterationCosts(TINY, "trn2", **grid).build()
    symbolic = len(compiled_graphs()) - before
    assert len(costs.measurements) == 18 and symbolic <= 8
    assert all(abs(r["error_percent"]) < 10 for r in costs.check())
    static = IterationCosts(TINY, "trn2", **grid)
    static.dynamic = False
    static.build()
    assert len(compiled_graphs()) - before - symbolic == 2 * len(static.measurements)
    for a, b in zip(costs.measurements, static.measurements):
        assert a == pytest.approx(b, rel=1e-9)


def test_costs_measured_under_moved_assumptions_are_not_reused_outside_them():
    """The session's cost cache is keyed by the assumptions moved right now: a serving run inside
    ``assumptions.overridden(...)`` measures its own costs, and the run after it gets the defaults'."""
    from backend.sim import assumptions
    from backend.sim.serving import SchedulerConfig

    config = SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=32, max_model_len=64)
    nominal = iteration_costs(TINY, "trn2", 1, config, compiled=False)
    with assumptions.overridden({"dma.issue_ns": 10 * assumptions.value("dma.issue_ns")}):
        slow = iteration_costs(TINY, "trn2", 1, config, compiled=False)
    assert slow is not nominal and slow.decode_s(2, 48) > nominal.decode_s(2, 48)
    assert iteration_costs(TINY, "trn2", 1, config, compiled=False) is nominal
