"""Real training steps on neuron lower every op to the device: no host fallbacks.

Each model runs forward, cross-entropy loss, backward and an AdamW(foreach) step under
recording; every record is lowered for trn2 and none may come back as a host fallback, except
the ops named in ALLOWED_FALLBACKS.
"""
import collections

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_models import RNNHead

from backend import recording
from backend.device import numerics
from backend.lowering import lower

# Ops these steps may leave on the host, with the reason. Empty: every op the five models use
# has a device lowering. (Genuine host-only ops, backend.lowering.eager.HOST_ONLY_OPS such as
# nonzero or masked_select, do not occur in these steps.)
ALLOWED_FALLBACKS: dict[str, str] = {}


class Sink:
    def __init__(self):
        self.records = []

    def feed(self, record):
        self.records.append(record)


class CausalTransformer(nn.Module):
    def __init__(self, vocab=50, d=32, heads=4, seq=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.layer(self.emb(tokens), src_mask=mask, is_causal=True))


MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10)),
            lambda: torch.randn(8, 20), lambda: torch.randint(0, 10, (8,))),
    "cnn": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                  nn.Flatten(), nn.Linear(16, 10)),
            lambda: torch.randn(4, 3, 16, 16), lambda: torch.randint(0, 10, (4,))),
    "transformer": (CausalTransformer, lambda: torch.randint(0, 50, (2, 16)), lambda: torch.randint(0, 50, (32,))),
    "lstm": (lambda: RNNHead(nn.LSTM), lambda: torch.randn(3, 7, 8), lambda: torch.randint(0, 3, (3,))),
    "gru": (lambda: RNNHead(nn.GRU), lambda: torch.randn(3, 7, 8), lambda: torch.randint(0, 3, (3,))),
}


def training_step_records(name):
    build, make_x, make_y = MODELS[name]
    torch.manual_seed(0)
    model = build().to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x, y = make_x().to("neuron"), make_y().to("neuron")
    sink = Sink()
    with recording.recording(sink):
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return sink.records


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_step_has_no_host_fallbacks(neuron, name):
    records = training_step_records(name)
    names = {r.name for r in records}
    assert "aten::_foreach_addcdiv_" in names                # the AdamW step was recorded
    fallbacks = collections.Counter(r.name for r in records
                                    if lower(r, "trn2").kind == "fallback" and r.name not in ALLOWED_FALLBACKS)
    assert not fallbacks, f"{name}: host fallbacks {dict(fallbacks)}"


def test_cnn_step_pools_on_device(neuron):
    programs = {r.name: lower(r, "trn2") for r in training_step_records("cnn")}
    for name in ("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward"):
        assert programs[name].kind == "op"
        assert any(i.engine == "vector" for i in programs[name].instructions)


def test_hardware_numerics_cost_fp32_matmuls_at_the_bf16_rate(neuron):
    layer = nn.Linear(256, 256).to("neuron")
    x = torch.randn(512, 256).to("neuron")
    runs = {}
    for on in (False, True):
        sink = Sink()
        with numerics.hardware_numerics(on), recording.recording(sink):
            layer(x)
        mm = next(r for r in sink.records if r.name in ("aten::addmm", "aten::mm", "aten::linear"))
        runs[on] = (mm.attrs.get("autocast"), {i.dtype for i in lower(mm, "trn2").instructions
                                               if i.opcode == "nc_matmul"})
    assert runs[False] == (None, {"float32"})
    assert runs[True] == ("bfloat16", {"bfloat16"})
