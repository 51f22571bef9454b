"""``wb.models.Llama`` computes what Hugging Face's ``LlamaForCausalLM`` computes (same state dict,
same logits, with and without a KV cache); LoRA as peft attaches it; recomputation by named
value changes which ops run in backward, never the gradients; 70B shapes build data-free."""
import pytest
import torch
import torch.nn.functional as F

import workbench as wb
from workbench.models import LLAMA_CONFIGS, Llama, LlamaConfig, Lora, Remat, attach_lora, llama_config
from workbench.models.configs import Llama3RopeScaling

transformers = pytest.importorskip("transformers")

TINY = LlamaConfig("tiny", vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                   rope_scaling=Llama3RopeScaling(factor=8.0, original_max_position_embeddings=16))


def _pair(config: LlamaConfig = TINY):
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(config.to_hf()).eval()
    ours = Llama(config).eval()
    ours.load_state_dict(hf.state_dict(), strict=True)
    return hf, ours


@pytest.mark.parametrize("config", [TINY, TINY.replace(num_key_value_heads=4, rope_scaling=None,
                                                       tie_word_embeddings=True)], ids=["gqa-llama3-rope", "mha-tied"])
def test_logits_match_hugging_face(config):
    hf, ours = _pair(config)
    ids = torch.randint(0, config.vocab_size, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, rtol=1e-5, atol=1e-5)


def test_prefill_then_decode_matches_one_forward():
    hf, ours = _pair()
    ids = torch.randint(0, TINY.vocab_size, (1, 9))
    cache = ours.new_cache()
    with torch.no_grad():
        full = hf(ids).logits
        prefill = ours(ids[:, :6], cache, logits_to_keep=1)
        chunk = ours(ids[:, 6:8], cache, start=6)                 # a chunk after the cache: explicit mask
        decode = ours(ids[:, 8:], cache, start=8)
    torch.testing.assert_close(prefill[:, -1], full[:, 5], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chunk, full[:, 6:8], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(decode[:, -1], full[:, 8], rtol=1e-5, atol=1e-5)
    assert cache[0][0].shape == (1, TINY.num_key_value_heads, 9, TINY.head_dim)


def test_named_configs_round_trip_through_hugging_face():
    for config in LLAMA_CONFIGS.values():
        assert LlamaConfig.from_hf(config.to_hf()).replace(name=config.name) == config
    with torch.device("meta"):
        hf = transformers.LlamaForCausalLM(llama_config("Llama-3.2-1B").to_hf())
    assert sum(p.numel() for p in hf.parameters()) == llama_config("Llama-3.2-1B").num_parameters == 1_235_814_400
    assert llama_config("Llama-3-8B").num_parameters == 8_030_261_248
    with pytest.raises(KeyError, match="known: Llama-3.2-1B"):
        llama_config("Llama-9")


def test_lora_as_peft_attaches_it():
    hf, lora = _pair()
    attach_lora(lora, Lora(r=4, lora_alpha=8))           # after loading, as peft's get_peft_model
    assert set(Llama(TINY, lora=Lora(r=4)).state_dict()) == set(lora.state_dict())
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert trainable == {f"model.layers.{i}.self_attn.{m}_proj.lora_{ab}.weight"
                         for i in range(2) for m in "qv" for ab in "AB"}
    ids = torch.randint(0, TINY.vocab_size, (1, 7))
    with torch.no_grad():
        torch.testing.assert_close(lora(ids), hf(ids).logits, rtol=1e-5, atol=1e-5)   # lora_B starts at zero
        q = lora.model.layers[0].self_attn.q_proj
        q.lora_B.weight.normal_()
        x = torch.randn(3, TINY.hidden_size)
        torch.testing.assert_close(q(x), q.base_layer(x) + x @ q.lora_A.weight.T @ q.lora_B.weight.T * 2.0)
    with pytest.raises(ValueError, match="not found"):
        Llama(TINY, lora=Lora(target_modules=("qkv",)))


def _grads(remat):
    torch.manual_seed(0)
    model = Llama(TINY, remat=remat)
    ids = torch.randint(0, TINY.vocab_size, (2, 8))
    F.cross_entropy(model(ids).flatten(0, 1), ids.flatten()).backward()
    return {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("remat", [Remat(), Remat({"query_proj", "key_proj", "value_proj", "out_proj"})],
                         ids=["whole-layer", "save-projections"])
def test_recomputation_leaves_gradients_alone(remat):
    expected, got = _grads(None), _grads(remat)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="unknown remat names"):
        Remat({"qkv"})


def _backward_mms(remat, layers: int) -> int:
    """Matmuls of one data-free training step of a ``layers``-layer model (fwd + bwd)."""
    config = TINY.replace(num_hidden_layers=layers)
    with torch.device("neuron"), torch.neuron.timing_only():
        model = Llama(config, remat=remat, dtype=torch.bfloat16)
        ids = torch.randint(0, config.vocab_size, (1, 16))
        with wb.profile(target="trn2") as prof:
            F.cross_entropy(model(ids).flatten(0, 1).float(), ids.flatten()).backward()
    names = list(prof.ops["name"])
    return sum(n in ("aten::mm", "aten::addmm") for n in names)


def test_recomputation_reruns_what_was_not_saved():
    """Per layer: 7 forward and 14 backward matmuls; saving the projections recomputes only
    gate and up (down's output is not read by backward), whole-layer recomputes all but down."""
    per_layer = {name: _backward_mms(remat, 2) - _backward_mms(remat, 1) for name, remat in (
        ("none", None), ("projections", Remat({"query_proj", "key_proj", "value_proj", "out_proj"})),
        ("whole", Remat()))}
    assert per_layer == {"none": 21, "projections": 23, "whole": 27}


def test_builds_data_free_at_70b_shapes():
    config = llama_config("Llama-3-70B", num_hidden_layers=2)
    wb.set_device("neuron", wb.derive("trn2", name="trn2-big", hbm_bytes=96 * 2**30), timing_only=True)
    try:
        model = Llama(config, dtype=torch.bfloat16)
        assert model.lm_head.weight.device.type == "neuron"
        assert sum(p.numel() for p in model.parameters()) == config.num_parameters
        assert torch.neuron.memory_allocated() >= 2 * config.num_parameters
    finally:
        wb.set_device("cpu")
