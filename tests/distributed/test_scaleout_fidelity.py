"""The multi-chip fidelity rows' workload: rank 0 of a fake TP world running its shard of the shared Llama."""
import logging

import pytest

from backend.lowering.timeline import replay
from backend.sim.collectives import collective_cost
from backend.lowering.collectives import priced_on
from benchmarks.fidelity.scaleout import core_topology, tp_llama_records

TINY = dict(tp=4, hidden_size=512, num_attention_heads=4, num_key_value_heads=4, intermediate_size=1024,
            vocab_size=1024)
ATTENTION = "aten::_scaled_dot_product_fused_attention_overrideable"        # the device's fused SDPA


def _collectives(records):
    return [r for r in records if "collective" in r.attrs]


def test_train_shard_issues_megatrons_all_reduces_per_block(caplog):
    caplog.set_level(logging.ERROR)
    one, two = (tp_llama_records(n, mode="train", seq=256, **TINY) for n in (1, 2))
    per_block = len(_collectives(two)) - len(_collectives(one))
    assert per_block == 4                                   # attention and MLP, forward and backward
    assert any(r.outputs[0].shape == (256, 3 * 128) for r in two if r.name == "aten::mm")   # fused q/k/v: 1 head of 4
    assert {r.attrs["ranks"] for r in _collectives(two)} == {4}
    assert {r.attrs["nbytes"] for r in _collectives(two) if r.attrs["collective"] == "all_reduce"} \
        >= {256 * 512 * 2}                                  # the bf16 activations of the block


def test_decode_step_reads_the_kv_cache_and_reduces_twice_per_block(caplog):
    caplog.set_level(logging.ERROR)
    one, two = (tp_llama_records(n, mode="decode", batch=2, context=64, **TINY) for n in (1, 2))
    assert len(_collectives(two)) - len(_collectives(one)) == 2
    assert [r.attrs["collective"] for r in _collectives(one)][-1] == "all_gather"     # vocab-parallel logits
    attention = [r for r in one if r.name == ATTENTION]
    assert attention and attention[0].inputs[1].shape == (2, 1, 64, 128)


def test_core_topology_keeps_a_tp32_group_inside_one_trn1_instance():
    cores = core_topology()
    assert cores.devices_per_node == 32 and cores.intra_bytes_per_s == 192e9
    inside = collective_cost("all_reduce", 1 << 20, 32, cores)
    assert {p.level for p in inside.phases} == {"intra"}
    chips = collective_cost("all_reduce", 1 << 20, 32, "trn1.32xlarge")
    assert chips.time_ns > inside.time_ns                  # counted per chip, 32 ranks would span 2 nodes


def test_collectives_priced_on_the_per_core_topology(caplog):
    caplog.set_level(logging.ERROR)
    records = tp_llama_records(1, mode="decode", batch=2, context=64, **TINY)
    slow = core_topology(intra_latency_ns=5000.0)
    assert replay(priced_on(records, slow), "trn1") > replay(priced_on(records, core_topology()), "trn1")


def test_sequence_parallel_swaps_each_all_reduce_for_a_reduce_scatter_and_an_all_gather(caplog):
    caplog.set_level(logging.ERROR)
    one, two = (tp_llama_records(n, mode="train", seq=256, sequence_parallel=True, **TINY) for n in (1, 2))
    kinds = [[r.attrs["collective"] for r in _collectives(records)] for records in (one, two)]
    # 4 of each, plus the two column-parallel linears all-gathering their input again in backward
    assert [kinds[1].count(k) - kinds[0].count(k) for k in ("all_reduce", "all_gather", "reduce_scatter")] == [0, 6, 4]
    assert {r.attrs["nbytes"] for r in _collectives(two) if r.attrs["collective"] in ("all_gather", "reduce_scatter")} \
        == {256 * 512 * 2}                                  # the full sequence's bf16 activations, gathered or scattered
    norms = [r for r in two if r.name == "aten::rsqrt"]
    assert norms and all(r.inputs[0].shape == (1, 256 // 4, 1) for r in norms)    # RMSNorm on 1/TP of the tokens


def test_selective_checkpointing_runs_attention_and_swiglu_forward_again_in_backward(caplog):
    caplog.set_level(logging.ERROR)
    plain, recomputed = (tp_llama_records(1, mode="train", seq=256, selective_checkpoint=r, **TINY) for r in (False, True))
    for forward in (ATTENTION, "aten::silu"):
        assert [r.name for r in plain].count(forward) == 1 and [r.name for r in recomputed].count(forward) == 2


def test_selective_checkpointing_issues_no_collective_again(caplog):
    """The recomputed regions issue none; the projections' gathers and scatters are saved, not replayed."""
    caplog.set_level(logging.ERROR)
    kinds = [[r.attrs["collective"] for r in _collectives(tp_llama_records(
        1, mode="train", seq=256, sequence_parallel=True, selective_checkpoint=c, **TINY))] for c in (False, True)]
    assert kinds[0] == kinds[1]


def test_standard_mixed_precision_norms_in_fp32_and_accumulates_each_gradient_into_fp32(caplog):
    caplog.set_level(logging.ERROR)
    plain, mixed = (tp_llama_records(1, mode="train", seq=256, standard_mixed_precision=m, **TINY) for m in (False, True))
    scaled = lambda records: {r.outputs[0].dtype for r in records if r.name == "aten::mul" and (512,) in  # noqa: E731
                              [i.shape for i in r.inputs]}                 # the norm weight times the normalised rows
    assert scaled(mixed) == {"float32"} and scaled(plain) == {"bfloat16"}
    accumulated = [r for r in mixed if r.name == "aten::add_" and r.inputs[0].dtype == "float32"]
    # 4 linear weights and 2 norm weights of the block, the final norm, the head and the embedding
    assert sorted(r.inputs[0].shape for r in accumulated) == sorted(
        [(384, 512), (512, 128), (512, 512), (512, 256), (512,), (512,), (512,), (256, 512), (256, 512)])
    assert not [r for r in plain if r.name == "aten::add_" and r.inputs[0].dtype == "float32"]


def test_decode_weights_are_laid_out_at_load_and_training_uses_linear_weights_transposed(caplog):
    caplog.set_level(logging.ERROR)
    decode = tp_llama_records(1, mode="decode", batch=2, context=64, **TINY)
    train = tp_llama_records(1, mode="train", seq=256, **TINY)
    qkv = lambda records: next(r for r in records if r.name == "aten::mm")      # noqa: E731
    assert qkv(decode).inputs[1].shape == (512, 128) and qkv(decode).inputs[1].strides == (128, 1)   # q alone
    assert qkv(train).inputs[1].shape == (512, 384) and qkv(train).inputs[1].strides == (1, 512)


def test_each_sequence_pays_its_share_of_the_zero1_exchange_on_trn1_or_trn1n_efa():
    from benchmarks.fidelity.scaleout import _dp_gradient_ms, _with_dp_share
    from backend.sim.sensitivity import TimeBand
    step = _dp_gradient_ms(32, 32)
    # fp32 shard of a TP32 rank: twice the bytes of bf16; trn1n's doubled EFA halves the time
    assert _dp_gradient_ms(32, 32, 2) == pytest.approx(step / 2, rel=0.01)
    band, share = _with_dp_share(TimeBand(500e6, 450e6, 550e6))
    assert share == pytest.approx(step * 1e6 / 32)                  # 1024 sequences / DP32 per step
    assert (band.nominal_ns, band.high_ns) == (500e6 + share, 550e6 + share)
    assert band.low_ns == pytest.approx(450e6 + share / 2, rel=0.01)
    assert band.effects[0].swing_ns == pytest.approx(share / 2, rel=0.01)


def test_training_loss_is_the_vocab_parallel_cross_entropy_with_three_all_reduces(caplog):
    caplog.set_level(logging.ERROR)
    records = tp_llama_records(1, mode="train", seq=256, **TINY)
    reduced = [r for r in _collectives(records) if r.attrs["collective"] == "all_reduce"]
    head = [r for r in reduced if r.inputs[0].shape == (255,)]      # max, target logit, denominator per token
    assert len(head) == 3 and {r.attrs["nbytes"] for r in head} == {255 * 4}
    assert any(r.name == "aten::div_" and r.inputs[0].shape == (255, 256) for r in records)   # the softmax kept


def test_training_and_decode_rotate_q_and_k(caplog):
    caplog.set_level(logging.ERROR)
    train = tp_llama_records(1, mode="train", seq=256, **TINY)
    decode = tp_llama_records(1, mode="decode", batch=2, context=64, **TINY)
    for records, shape in ((train, (1, 1, 256, 128)), (decode, (2, 1, 1, 128))):
        rotated = [r for r in records if r.name == "aten::cat" and r.outputs[0].shape == shape]
        assert len(rotated) == 2                            # rotate_half of q and of k


def test_decode_writes_the_new_keys_into_the_static_cache_in_place(caplog):
    caplog.set_level(logging.ERROR)
    decode = tp_llama_records(1, mode="decode", batch=2, context=64, **TINY)
    written = [r for r in decode if r.name == "aten::copy_"]
    assert [r.inputs[0].shape for r in written] == [(2, 1, 1, 128)] * 2          # K and V of the new token
    assert not [r for r in decode if r.name == "aten::cat" and r.outputs[0].shape[2:3] == (64,)]
