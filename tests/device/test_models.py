"""Real model shapes: forward, backward and an optimizer step on neuron equal CPU."""
import copy

import pytest
import torch
import torch.nn as nn


class TinyTransformer(nn.Module):
    def __init__(self, vocab=50, d=32, heads=4, layers=2, seq=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        h = self.emb(tokens) + self.pos[: tokens.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.blocks(h, mask=mask, is_causal=True))


class RNNHead(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(8, 16, batch_first=True, num_layers=2)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        return self.out(self.rnn(x)[0][:, -1])


class CellHead(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell(8, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        state = self.cell(x)
        state = self.cell(x, state)   # second step feeds the state back
        return self.out(state[0] if isinstance(state, tuple) else state)


MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10)), lambda: torch.randn(8, 20)),
    "cnn": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(8, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(16, 10)), lambda: torch.randn(4, 3, 16, 16)),
    "transformer": (TinyTransformer, lambda: torch.randint(0, 50, (2, 16))),
    "lstm": (lambda: RNNHead(nn.LSTM), lambda: torch.randn(3, 7, 8)),
    "gru": (lambda: RNNHead(nn.GRU), lambda: torch.randn(3, 7, 8)),
    "rnn_tanh": (lambda: RNNHead(nn.RNN), lambda: torch.randn(3, 7, 8)),
    "lstm_cell": (lambda: CellHead(nn.LSTMCell), lambda: torch.randn(5, 8)),
    "gru_cell": (lambda: CellHead(nn.GRUCell), lambda: torch.randn(5, 8)),
    "embedding_bag": (lambda: nn.Sequential(nn.Embedding(100, 16), nn.Flatten(), nn.Linear(16 * 5, 2)),
                      lambda: torch.randint(0, 100, (4, 5))),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_training_step_matches_cpu(neuron, name):
    build, make_input = MODELS[name]
    torch.manual_seed(0)
    ref = build()
    dev = copy.deepcopy(ref).to("neuron")
    x = make_input()
    # SGD keeps the step linear in the gradient; Adam would amplify fp32 rounding noise in
    # near-zero gradients (its step is ~lr * sign(g)). Adam itself is covered in test_semantics.
    opt_ref = torch.optim.SGD(ref.parameters(), lr=1e-2, momentum=0.9)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=1e-2, momentum=0.9)
    for model, opt, inp in ((ref, opt_ref, x), (dev, opt_dev, x.to("neuron"))):
        out = model(inp)
        loss = out.float().pow(2).mean()
        loss.backward()
        model.grads = [p.grad.detach().cpu().clone() for p in model.parameters()]
        opt.step()
        model.zero_grad()
        model.last_out = out
    torch.testing.assert_close(dev.last_out.detach().cpu(), ref.last_out.detach(), rtol=1e-4, atol=1e-5)
    for (n, _), g_ref, g_dev in zip(ref.named_parameters(), ref.grads, dev.grads):
        torch.testing.assert_close(g_dev, g_ref, rtol=1e-4, atol=1e-5, msg=lambda m: f"grad {n}: {m}")
    for (n, p_ref), p_dev in zip(ref.named_parameters(), dev.parameters()):
        assert p_dev.device.type == "neuron", n
        torch.testing.assert_close(p_dev.detach().cpu(), p_ref.detach(), rtol=1e-4, atol=1e-5, msg=lambda m: f"{n}: {m}")
