"""The DDP what-if of ``make bench`` (Hugging Face ViT under DDP, timing-only, on a fake world)
runs data-free: its bucket all-reduces are priced and it reads no values."""
from transformers import ViTConfig

from benchmarks.ddp_what_if import ddp_vit_step


def test_a_small_vit_steps_under_ddp_on_a_fake_world_without_values(neuron):
    config = ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                       image_size=32, patch_size=8)
    result = ddp_vit_step(config, batch=4, world=32)
    assert result["all_reduces"] >= 1
    assert result["simulated_s"] > 0
    assert result["summary"]["communication_time"] > 0
