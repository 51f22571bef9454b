"""Synthetic eager aten op streams (OpRecords, no torch) shaped like real models.

``gpt2_training_step`` follows what a PyTorch GPT-2 training step dispatches eagerly: per
layer, layer norms, the four linears as ``addmm`` with transposed weights, fused attention,
GELU, residual adds; the backward mirror (``mm`` for input and weight gradients, column
``sum`` for biases, norm/activation/attention backward ops); embedding, tied LM head, log-softmax
and NLL loss; views in between, as the device layer reports them.
"""
from __future__ import annotations

from backend.sim.descriptors import OpRecord, TensorDesc

__all__ = ["OpStream", "gpt2_training_step", "lm_loss_backward", "transformer_block", "block_forward", "block_backward"]


class OpStream:
    """Appends OpRecords with running indices."""

    def __init__(self, dtype: str = "float32"):
        self.dtype = dtype
        self.records: list[OpRecord] = []

    def t(self, *shape: int, dtype: str | None = None, strides: tuple | None = None) -> TensorDesc:
        return TensorDesc(tuple(shape), dtype or self.dtype, strides)

    def op(self, name: str, inputs, outputs, *, is_view: bool = False, **attrs) -> TensorDesc:
        self.records.append(OpRecord(len(self.records), name, tuple(inputs), tuple(outputs), attrs, is_view=is_view))
        return outputs[0] if outputs else inputs[0]

    def view(self, x: TensorDesc, *shape: int, strides: tuple | None = None) -> TensorDesc:
        return self.op("aten::view", [x], [self.t(*shape, dtype=x.dtype, strides=strides)], is_view=True)

    def linear(self, x: TensorDesc, d_in: int, d_out: int) -> TensorDesc:
        rows = x.numel // d_in
        wt = self.view(self.t(d_out, d_in), d_in, d_out, strides=(1, d_in))     # weight.t()
        return self.op("aten::addmm", [self.t(d_out), x, wt], [self.t(rows, d_out)], beta=1, alpha=1)

    def linear_backward(self, grad: TensorDesc, x: TensorDesc, d_in: int, d_out: int) -> TensorDesc:
        rows = grad.numel // d_out
        gx = self.op("aten::mm", [grad, self.t(d_out, d_in)], [self.t(rows, d_in)])
        gt = self.view(grad, d_out, rows, strides=(1, d_out))                  # grad.t()
        self.op("aten::mm", [gt, x], [self.t(d_out, d_in)])
        self.op("aten::sum", [grad], [self.t(d_out)], dim=[0], keepdim=True)
        return gx

    def layer_norm(self, x: TensorDesc, d: int) -> TensorDesc:
        rows = x.numel // d
        return self.op("aten::native_layer_norm", [x, self.t(d), self.t(d)],
                       [self.t(rows, d), self.t(rows, 1), self.t(rows, 1)], normalized_shape=[d], eps=1e-5)

    def layer_norm_backward(self, grad: TensorDesc, d: int) -> TensorDesc:
        rows = grad.numel // d
        return self.op("aten::native_layer_norm_backward",
                       [grad, self.t(rows, d), self.t(rows, 1), self.t(rows, 1), self.t(d), self.t(d)],
                       [self.t(rows, d), self.t(d), self.t(d)], normalized_shape=[d],
                       output_mask=[True, True, True])


def block_forward(s: OpStream, batch: int, seq: int, d: int, heads: int, causal: bool = True) -> dict:
    """One GPT-2 block forward (``causal=False``: a BERT encoder block); returns what its backward reads."""
    tokens, hd = batch * seq, d // heads
    x = s.t(tokens, d)
    h = s.layer_norm(x, d)
    qkv = s.linear(h, d, 3 * d)
    q = s.view(qkv, batch, heads, seq, hd, strides=(seq * 3 * d, hd, 3 * d, 1))
    attn = s.op("aten::_scaled_dot_product_flash_attention_for_cpu", [q, q, q],
                [s.t(batch, heads, seq, hd), s.t(batch, heads, seq)], is_causal=causal, dropout_p=0.0)
    merged = s.op("aten::clone", [s.view(attn, batch, seq, heads, hd, strides=(heads * seq * hd, hd, seq * hd, 1))],
                  [s.t(batch, seq, heads, hd)])
    merged = s.view(merged, tokens, d)
    proj = s.linear(merged, d, d)
    x = s.op("aten::add", [x, proj], [s.t(tokens, d)], alpha=1)
    h2 = s.layer_norm(x, d)
    up = s.linear(h2, d, 4 * d)
    act = s.op("aten::gelu", [up], [s.t(tokens, 4 * d)], approximate="tanh")
    down = s.linear(act, 4 * d, d)
    s.op("aten::add", [x, down], [s.t(tokens, d)], alpha=1)
    return {"h": h, "q": q, "attn": attn, "merged": merged, "h2": h2, "up": up, "act": act, "causal": causal}


def block_backward(s: OpStream, saved: dict, batch: int, seq: int, d: int, heads: int) -> None:
    tokens, hd = batch * seq, d // heads
    h, q, attn, merged, h2, up, act = (saved[k] for k in ("h", "q", "attn", "merged", "h2", "up", "act"))
    g = s.t(tokens, d)
    g_act = s.linear_backward(g, act, 4 * d, d)
    g_up = s.op("aten::gelu_backward", [g_act, up], [s.t(tokens, 4 * d)], approximate="tanh")
    g_h2 = s.linear_backward(g_up, h2, d, 4 * d)
    g = s.op("aten::add", [g, s.layer_norm_backward(g_h2, d)], [s.t(tokens, d)], alpha=1)
    g_m = s.linear_backward(g, merged, d, d)
    g_attn = s.op("aten::clone", [s.view(g_m, batch, heads, seq, hd, strides=(seq * d, hd, d, 1))],
                  [s.t(batch, heads, seq, hd)])
    s.op("aten::_scaled_dot_product_flash_attention_for_cpu_backward",
         [g_attn, q, q, q, attn, s.t(batch, heads, seq)],
         [s.t(batch, heads, seq, hd)] * 3, is_causal=saved.get("causal", True), dropout_p=0.0)
    g_qkv = s.op("aten::cat", [s.t(tokens, d)] * 3, [s.t(tokens, 3 * d)], dim=1)
    g_h = s.linear_backward(g_qkv, h, d, 3 * d)
    s.op("aten::add", [g, s.layer_norm_backward(g_h, d)], [s.t(tokens, d)], alpha=1)


def transformer_block(s: OpStream, batch: int, seq: int, d: int, heads: int, backward: bool = True) -> None:
    """One GPT-2 block forward and, optionally, its backward."""
    saved = block_forward(s, batch, seq, d, heads)
    if backward:
        block_backward(s, saved, batch, seq, d, heads)


def lm_loss_backward(s: OpStream, logits: TensorDesc, h: TensorDesc, wte: TensorDesc) -> TensorDesc:
    """Cross-entropy over tied-embedding logits and its backward to the head input and the table."""
    (tokens, vocab), d = logits.shape, h.shape[-1]
    logp = s.op("aten::_log_softmax", [logits], [s.t(tokens, vocab)], dim=1, half_to_float=False)
    target = s.t(tokens, dtype="int64")
    s.op("aten::nll_loss_forward", [logp, target], [s.t(), s.t()], reduction=1, ignore_index=-100)
    g = s.op("aten::nll_loss_backward", [s.t(), logp, target, s.t()], [s.t(tokens, vocab)],
             reduction=1, ignore_index=-100)
    g = s.op("aten::_log_softmax_backward_data", [g, logp], [s.t(tokens, vocab)], dim=1, input_dtype=s.dtype)
    s.op("aten::mm", [g, wte], [s.t(tokens, d)])
    s.op("aten::mm", [s.view(g, vocab, tokens, strides=(1, vocab)), h], [s.t(vocab, d)])
    return g


def gpt2_training_step(batch: int = 8, seq: int = 128, layers: int = 12, d: int = 768, heads: int = 12,
                       vocab: int = 50257, dtype: str = "float32") -> list[OpRecord]:
    """GPT-2 small (124M) forward + backward on batch x seq tokens, as eager aten ops."""
    s = OpStream(dtype)
    tokens = batch * seq
    ids = s.t(batch, seq, dtype="int64")
    wte = s.t(vocab, d)
    emb = s.op("aten::embedding", [wte, ids], [s.t(batch, seq, d)])
    s.op("aten::add", [emb, s.t(seq, d)], [s.t(batch, seq, d)], alpha=1)
    saved = [block_forward(s, batch, seq, d, heads) for _ in range(layers)]
    h = s.layer_norm(s.t(tokens, d), d)
    logits = s.op("aten::mm", [h, s.view(wte, d, vocab, strides=(1, d))], [s.t(tokens, vocab)])
    lm_loss_backward(s, logits, h, wte)
    s.layer_norm_backward(s.t(tokens, d), d)
    for block in reversed(saved):
        block_backward(s, block, batch, seq, d, heads)
    s.op("aten::embedding_dense_backward", [s.t(batch, seq, d), ids], [s.t(vocab, d)],
         num_weights=vocab, padding_idx=-1, scale_grad_by_freq=False)
    return s.records
