"""Hugging Face ``generate()`` with a static KV cache and a compiled forward, on the device.

The static cache is the upstream form of "write in place into a buffer, then read it": the
cache's key/value tensors are created on the model's device inside the first compiled call
and updated with ``index_copy_`` at ``cache_position`` on every token. Greedy tokens must equal
eager CPU generation. A tiny Llama built from its config: no download.
"""
import pytest
import torch

import backend.compile

transformers = pytest.importorskip("transformers")

NEW_TOKENS = 8


def _tiny_llama():
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _cpu_and_device_models(device):
    cpu = _tiny_llama()
    on_device = _tiny_llama()
    on_device.load_state_dict(cpu.state_dict())
    return cpu, on_device.to(device)


def _prompt():
    torch.manual_seed(1)
    return torch.randint(0, 96, (2, 5))


def test_static_cache_generate_with_compiled_forward_matches_cpu(neuron):
    # https://huggingface.co/docs/transformers/llm_optims#static-kv-cache-and-torchcompile
    cpu, model = _cpu_and_device_models(neuron)
    prompt = _prompt()
    want = cpu.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)

    model.generation_config.cache_implementation = "static"
    model.forward = torch.compile(model.forward, backend="neuron", fullgraph=True)
    got = model.generate(prompt.to(neuron), max_new_tokens=NEW_TOKENS, do_sample=False)

    assert got.device.type == "neuron"
    assert torch.equal(got.cpu(), want)
    assert backend.compile.compiled_graphs(), "generate() ran no compiled graph"


@pytest.mark.slow
def test_static_cache_generate_with_compile_config_matches_cpu(neuron):
    # generate() compiles the forward itself when given a CompileConfig (the path it takes
    # by default for a static cache on an accelerator)
    cpu, model = _cpu_and_device_models(neuron)
    prompt = _prompt()
    want = cpu.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
    cache = transformers.StaticCache(config=model.config, max_cache_len=prompt.shape[1] + NEW_TOKENS)
    got = model.generate(prompt.to(neuron), max_new_tokens=NEW_TOKENS, do_sample=False, past_key_values=cache,
                         compile_config=transformers.CompileConfig(backend="neuron", fullgraph=True))

    assert torch.equal(got.cpu(), want)
    assert backend.compile.compiled_graphs(), "generate() ran no compiled graph"
    # the cache the compiled graphs wrote lives on the device and holds every position written
    keys = cache.layers[0].keys
    assert keys.device.type == "neuron"
    assert keys.cpu()[:, :, : prompt.shape[1] + NEW_TOKENS - 1].abs().sum(-1).gt(0).all()
