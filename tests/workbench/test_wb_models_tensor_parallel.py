"""``wb.models.Llama(tensor_parallel=...)``: a degree-1 shard computes what the plain Llama computes
(logits, loss through the vocab-parallel cross-entropy, gradients), fused or not, with and without
sequence parallelism; a degree-2 shard in a fake world has each rank's shapes and issues Megatron's
collectives per block; the static KV cache computes what the dynamic one does."""
import logging

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import workbench as wb
from workbench.distributed import fake_world
from workbench.models import Llama, LlamaConfig, Lora, Remat
from workbench.models.tensor_parallel import TensorParallel, parallel_cross_entropy

TINY = LlamaConfig("tiny", vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0)


def _fused_state(state: dict) -> dict:
    """A plain Llama's state dict with q/k/v and gate/up concatenated, as the fused shards hold them at degree 1."""
    out = {}
    for name, value in state.items():
        if name.endswith("self_attn.q_proj.weight"):
            prefix = name[:-len("q_proj.weight")]
            out[prefix + "qkv_proj.weight"] = torch.cat([state[prefix + f"{m}_proj.weight"] for m in "qkv"])
        elif name.endswith("mlp.gate_proj.weight"):
            prefix = name[:-len("gate_proj.weight")]
            out[prefix + "gate_up_proj.weight"] = torch.cat([state[prefix + f"{m}_proj.weight"] for m in ("gate", "up")])
        elif not any(name.endswith(f"{m}_proj.weight") for m in ("k", "v", "up")) or "lora" in name:
            out[name] = value
    return out


def _loss_and_grads(model, ids, parallel: bool):
    logits = model(ids)
    kept = logits.detach().clone()              # parallel_cross_entropy overwrites its input, a view at batch 1
    shifted = logits[..., :-1, :].contiguous().flatten(0, 1)
    target = ids[:, 1:].flatten()
    loss = parallel_cross_entropy(shifted, target).mean() if parallel else F.cross_entropy(shifted, target)
    loss.backward()
    return kept, loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["tp", "sp"])
def test_degree_one_shard_computes_what_the_plain_llama_computes(fused, sequence_parallel):
    torch.manual_seed(0)
    plain = Llama(TINY)
    tp = TensorParallel(1, sequence_parallel=sequence_parallel, fuse_qkv=fused, fuse_gate_up=fused)
    shard = Llama(TINY, tensor_parallel=tp, remat=Remat(frozenset({"qkv_proj", "query_proj"})))
    state = plain.state_dict()
    shard.load_state_dict(_fused_state(state) if fused else state, strict=True)
    ids = torch.randint(0, TINY.vocab_size, (1, 12))
    logits, loss, grads = _loss_and_grads(plain, ids, parallel=False)
    shard_logits, shard_loss, shard_grads = _loss_and_grads(shard, ids, parallel=True)
    torch.testing.assert_close(shard_logits, logits, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(shard_loss, loss, rtol=1e-6, atol=1e-6)
    expected = _fused_state(grads) if fused else grads
    assert set(shard_grads) == set(expected)
    for name, grad in expected.items():
        torch.testing.assert_close(shard_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)


def test_static_cache_computes_what_the_dynamic_cache_computes():
    torch.manual_seed(0)
    model = Llama(TINY).eval()
    ids = torch.randint(0, TINY.vocab_size, (2, 9))
    dynamic, static = model.new_cache(), model.new_cache(max_len=12, batch=2)
    with torch.no_grad():
        for begin, end in ((0, 6), (6, 8), (8, 9)):
            expected = model(ids[:, begin:end], dynamic, start=begin)
            torch.testing.assert_close(model(ids[:, begin:end], static, start=begin), expected, rtol=0, atol=0)
    assert static[0][0].shape == (2, TINY.num_key_value_heads, 12, TINY.head_dim)
    torch.testing.assert_close(static[1][1][:, :, :9], dynamic[1][1], rtol=0, atol=0)


def test_a_shard_needs_a_world_of_its_degree():
    with pytest.raises(ValueError, match="needs a default process group of 2 ranks"):
        Llama(TINY, tensor_parallel=TensorParallel(2))
    with pytest.raises(NotImplementedError, match="LoRA"):
        Llama(TINY, tensor_parallel=TensorParallel(1), lora=Lora())
    with pytest.raises(ValueError, match="not divisible by the tensor-parallel degree 3"):
        TensorParallel(3).divide(TINY.num_attention_heads, "num_attention_heads")


def _collectives(prof):
    return [r for r in prof.workload if "collective" in r.attrs]


def _degree_two_step(layers: int, sequence_parallel: bool, fused: bool = True, remat: Remat | None = None,
                     values_up_to: int = 0):
    """One training step of rank 0 of a 2-rank fake world, data-free (tensors of at most ``values_up_to``
    elements keep values); returns (model, collective kinds)."""
    config = TINY.replace(num_hidden_layers=layers, num_key_value_heads=1)       # one K/V head: replicated
    fake_world(2)
    try:
        with torch.device("neuron"), torch.neuron.timing_only(values_up_to=values_up_to):
            tp = TensorParallel(2, sequence_parallel=sequence_parallel, fuse_qkv=fused, fuse_gate_up=fused)
            model = Llama(config, dtype=torch.bfloat16, tensor_parallel=tp, remat=remat)
            ids = torch.randint(0, config.vocab_size, (1, 16))
            with wb.profile(target="trn2", source=False) as prof:
                logits = model(ids).float()
                target = torch.randint(0, config.vocab_size, (15,))
                parallel_cross_entropy(logits[..., :-1, :].contiguous().flatten(0, 1), target).mean().backward()
    finally:
        dist.destroy_process_group()
    return model, [op.attrs["collective"] for op in _collectives(prof)]


def test_degree_two_shard_holds_each_ranks_share(caplog):
    caplog.set_level(logging.ERROR)
    model, _ = _degree_two_step(1, sequence_parallel=False)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    hd = TINY.head_dim
    assert shapes["model.layers.0.self_attn.qkv_proj.weight"] == ((2 + 1 + 1) * hd, 64)   # 2 q heads, 1 K/V head each
    assert shapes["model.layers.0.self_attn.o_proj.weight"] == (64, 2 * hd)
    assert shapes["model.layers.0.mlp.gate_up_proj.weight"] == (96, 64)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (64, 48)
    assert shapes["model.embed_tokens.weight"] == shapes["lm_head.weight"] == (48, 64)
    assert shapes["model.layers.0.input_layernorm.weight"] == (64,)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_degree_two_block_issues_megatrons_collectives(caplog, fused):
    caplog.set_level(logging.ERROR)
    per_block = {}
    for sp in (False, True):
        one, two = (_degree_two_step(n, sp, fused)[1] for n in (1, 2))
        per_block[sp] = {k: two.count(k) - one.count(k) for k in ("all_reduce", "all_gather", "reduce_scatter")}
    # plain TP: one all_reduce after each row-parallel linear (fwd) and one before each column-parallel
    # region (bwd); unfused, each of the 3 + 2 column-parallel linears' input gradients is reduced
    assert per_block[False] == {"all_reduce": 4 if fused else 7, "all_gather": 0, "reduce_scatter": 0}
    # sequence parallel: gather entering (fwd) and again in bwd for the weight gradient, per column-parallel
    # linear; reduce-scatter leaving (fwd) and of each column-parallel input gradient (bwd)
    columns = 2 if fused else 5
    assert per_block[True] == {"all_reduce": 0, "all_gather": 2 * columns + 2, "reduce_scatter": 2 + columns}


def test_recomputation_reissues_only_the_collectives_of_recomputed_regions(caplog):
    """Whole-layer recomputation runs the block's forward again, collectives included (as Megatron's
    full recomputation does); saving the projections keeps their collectives out of the replay."""
    caplog.set_level(logging.ERROR)
    plain = _degree_two_step(1, sequence_parallel=True)[1]
    whole = _degree_two_step(1, sequence_parallel=True, remat=Remat())[1]
    saving = _degree_two_step(1, sequence_parallel=True, remat=Remat(frozenset({"qkv_proj", "out_proj", "mlp_gate_up",
                                                                                  "mlp_down"})))[1]
    assert saving == plain
    # the block's forward again up to the SwiGLU activation (backward reads nothing of down's output, so the
    # recomputation stops before it): 2 column-parallel gathers, o_proj's reduce-scatter
    assert {k: whole.count(k) - plain.count(k) for k in ("all_gather", "reduce_scatter")} == \
        {"all_gather": 2, "reduce_scatter": 1}

    with pytest.raises(NotImplementedError, match="data-free tensors only"):
        _degree_two_step(1, sequence_parallel=True, remat=Remat(frozenset({"qkv_proj"})), values_up_to=1 << 20)
