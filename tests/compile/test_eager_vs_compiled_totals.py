"""Eager and compiled runs of one program agree on the work: the same model FLOPs, and compiled
HBM traffic at most eager's (a fused kernel keeps intermediates in SBUF; it never adds HBM bytes)."""
import pytest
import torch
from torch import nn

import workbench as wb


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.LayerNorm(256)).to("neuron")


def _inference(model, x):
    with torch.no_grad():
        return model(x)


def _training(model, x):
    model(x).square().mean().backward()


# Known defect (strict xfail, so fixing it shows): a compiled training step of this MLP moves about
# 1.5x the HBM bytes of the eager one (16.4 vs 11.2 MB on trn1 and trn2); which saved values or spills
# the fused forward/backward kernels add is not yet found.
_TRAINING_MOVES_MORE = pytest.mark.xfail(strict=True, reason="compiled training moves ~1.5x eager's HBM bytes")


@pytest.mark.parametrize("run", [_inference, pytest.param(_training, marks=_TRAINING_MOVES_MORE)],
                         ids=["inference", "training"])
@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_compiled_does_the_same_flops_with_no_more_hbm_traffic(run, target):
    model, x = _mlp(), torch.randn(64, 256, device="neuron", requires_grad=run is _training)
    with wb.profile(target=target) as eager:
        run(model, x)
    compiled = torch.compile(model, backend="neuron")
    run(compiled, x)                                   # compile outside the measurement
    with wb.profile(target=target) as fused:
        run(compiled, x)
    e, c = eager.summary, fused.summary
    assert c["graph_count"] >= 1
    # Inference agrees exactly; in training AOTAutograd's decomposed backward of GELU and LayerNorm
    # counts 0.27% more elementwise FLOPs than the eager backward ops (matmul FLOPs are equal).
    assert c["total_flops"] == pytest.approx(e["total_flops"], rel=1e-6 if run is _inference else 0.01)
    assert c["hbm_read_bytes"] + c["hbm_write_bytes"] <= e["hbm_read_bytes"] + e["hbm_write_bytes"]
    assert c["total_time"] <= e["total_time"] * 1.02
