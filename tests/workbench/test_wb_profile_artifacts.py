"""No op of an ordinary training step is a lowering artifact: an op taking a real share of the
step while moving little data and doing little math means the lowering chose something no
compiler would (one DMA descriptor per element of a transposed or expanded view, a one-row
ones-matmul for a batch sum, a norm on 32 of 128 partitions). Each case below was one before."""
import pytest
import torch
from torch import nn

import workbench as wb

# An op above SHARE of the step must reach MIN_GBPS of HBM traffic or MIN_TFLOPS (trn2: ~360 GB/s
# of HBM and 20-80 TF/s per core; these floors are an order of magnitude below).
SHARE, MIN_GBPS, MIN_TFLOPS = 0.05, 25.0, 1.0


def _artifacts(step) -> list[str]:
    with wb.profile(target="trn2") as prof:
        step()
    ops = prof.ops[prof.ops["time_ns"] > 0]
    total = ops["time_ns"].sum()
    slow = ops[(ops["time_ns"] > SHARE * total) & (ops["hbm_bytes"] / ops["time_ns"] < MIN_GBPS)
               & (ops["flops"] / ops["time_ns"] / 1e3 < MIN_TFLOPS)]
    return [f"{r['name']} {r['input_shapes']}: {r['time_ns'] / total:.0%} of the step" for _, r in slow.iterrows()]


def _encoder_layer():
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(128, 4, 256, batch_first=True).to("neuron")    # dropout on: math SDPA
    x = torch.randn(4, 64, 128, device="neuron")
    return lambda: model(x).sum().backward()


def _bf16_block_with_float_loss():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).to("neuron").bfloat16()
    x = torch.randn(8, 128, 256, device="neuron", dtype=torch.bfloat16)
    return lambda: model(x).float().sum().backward()          # the expanded ones, cast to bf16


def _cnn_with_batch_norm():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
                          nn.BatchNorm2d(32), nn.ReLU()).to("neuron")
    x = torch.randn(16, 3, 64, 64, device="neuron")
    return lambda: model(x).sum().backward()


def _gqa_attention():
    torch.manual_seed(0)
    q = torch.randn(4, 8, 128, 64, device="neuron", requires_grad=True)
    kv = torch.randn(4, 2, 128, 64, device="neuron", requires_grad=True)

    def step():
        k = kv[:, :, None].expand(4, 2, 4, 128, 64).reshape(4, 8, 128, 64)    # repeat_kv
        (q @ k.transpose(-2, -1)).softmax(-1).sum().backward()
    return step


@pytest.mark.parametrize("build", [_encoder_layer, _bf16_block_with_float_loss, _cnn_with_batch_norm, _gqa_attention],
                         ids=["encoder-layer", "bf16-mlp", "cnn-batchnorm", "gqa"])
def test_no_op_is_a_lowering_artifact(build):
    assert _artifacts(build()) == []
