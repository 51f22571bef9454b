"""Grouped-query attention compiled: the K/V head repeats that tracing writes out (``enable_gqa``
and Hugging Face's ``repeat_kv`` both become ``unsqueeze -> expand -> clone -> view``) are read
through by the attention kernel, as a Neuron flash kernel indexes each query head's KV head."""
import pytest
import torch
import torch.nn.functional as F

import workbench as wb
from backend.compile import compiled_graphs

transformers = pytest.importorskip("transformers")
from transformers.integrations.sdpa_attention import repeat_kv  # noqa: E402


def _grouped(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def _repeated(q, k, v):                     # Hugging Face's form (with a mask, or under compile)
    return F.scaled_dot_product_attention(q, repeat_kv(k, 4), repeat_kv(v, 4), is_causal=True)


@pytest.mark.parametrize("fn", [_grouped, _repeated])
def test_compiled_grouped_attention_equals_cpu(fn):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 8, 16, 32), torch.randn(2, 2, 16, 32), torch.randn(2, 2, 16, 32)
    out = torch.compile(fn, backend="neuron")(*(t.to("neuron") for t in (q, k, v)))
    torch.testing.assert_close(out.cpu(), fn(q, k, v))


@pytest.mark.parametrize("fn", [_grouped, _repeated])
def test_compiled_grouped_attention_reads_kv_once(fn):
    with torch.neuron.timing_only():
        q = torch.empty(4, 32, 1 if fn is _grouped else 256, 128, dtype=torch.bfloat16, device="neuron")
        kv = torch.empty(4, 8, 256 if fn is _repeated else 2048, 128, dtype=torch.bfloat16, device="neuron")
        compiled = torch.compile(fn, backend="neuron")
        compiled(q, kv, kv)
        with wb.profile(timing_only=True) as prof:
            compiled(q, kv, kv)
    (kernel,) = compiled_graphs()[-1].parts["inference"].kernels
    attention = kernel.records[-1]
    assert "scaled_dot_product" in attention.name
    assert [t.shape[1] for t in attention.inputs[:3]] == [32, 8, 8]        # K and V unrepeated
    assert "aten::clone" not in {r.name for r in kernel.records}
    read = prof.summary["hbm_read_bytes"]
    assert q.nbytes + 2 * kv.nbytes <= read < 1.05 * (q.nbytes + 2 * kv.nbytes)


def test_repeat_read_elsewhere_is_still_copied():
    """A repeated K that the graph also returns leaves the kernel: its copy stays."""
    def attend_and_keep(q, k, v):
        k_rep = repeat_kv(k, 4)
        return F.scaled_dot_product_attention(q, k_rep, repeat_kv(v, 4)), k_rep

    with torch.neuron.timing_only():
        q = torch.empty(1, 8, 16, 32, device="neuron")
        kv = torch.empty(1, 2, 16, 32, device="neuron")
        torch.compile(attend_and_keep, backend="neuron")(q, kv, kv)
    kernels = compiled_graphs()[-1].parts["inference"].kernels
    clones = [r for k in kernels for r in k.records if r.name == "aten::clone"]
    attention = next(r for k in kernels for r in k.records if "scaled_dot_product" in r.name)
    assert clones and attention.inputs[1].shape[1] == 8
