"""scaled_dot_product_attention on the device: the fused path where CPU runs its flash kernel
(values and gradients equal CPU's) and for grouped-query attention (K/V read once per group),
the math path where CPU takes it otherwise, in timing-only mode and under torch.compile."""
import pytest
import torch
import torch.nn.functional as F

import workbench as wb

FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"


def _qkv(dtype, heads=(4, 4, 4), seq=32, dim=16):
    torch.manual_seed(0)
    return [torch.randn(2, h, seq, dim, dtype=dtype, requires_grad=True) for h in heads]


def _run(device, tensors, **kwargs):
    inputs = [t.detach().to(device).requires_grad_() for t in tensors]
    out = F.scaled_dot_product_attention(*inputs, **kwargs)
    out.float().square().sum().backward()
    return out.cpu(), [t.grad.cpu() for t in inputs]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"scale": 0.3},
                                    {"attn_mask": torch.randn(32, 32)},
                                    {"attn_mask": torch.rand(32, 32) > 0.3}])
def test_fused_path_equals_cpu_forward_and_backward(dtype, kwargs):
    tensors = _qkv(dtype)
    if "attn_mask" in kwargs:
        kwargs = {"attn_mask": kwargs["attn_mask"].to("neuron")}
        cpu_kwargs = {"attn_mask": kwargs["attn_mask"].cpu()}
    else:
        cpu_kwargs = kwargs
    with wb.profile() as prof:
        out, grads = _run("neuron", tensors, **kwargs)
    ref, ref_grads = _run("cpu", tensors, **cpu_kwargs)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)          # the very kernel CPU runs
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=0, atol=0)
    names = set(prof.ops["name"])
    assert {FUSED, FUSED + "_backward"} <= names and "aten::_softmax" not in names


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_grouped_query_attention_takes_the_fused_path(group, causal, dtype):
    """enable_gqa (as Hugging Face passes it without a mask): values and gradients match CPU's
    own GQA attention, through one fused op and its backward, with no repeated K/V."""
    tensors = _qkv(dtype, heads=(8, 8 // group, 8 // group))
    with wb.profile() as prof:
        out, grads = _run("neuron", tensors, is_causal=causal, enable_gqa=True)
    ref, ref_grads = _run("cpu", tensors, is_causal=causal, enable_gqa=True)
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(out, ref, **tol)
    for g, r in zip(grads, ref_grads):
        assert g.shape == r.shape
        torch.testing.assert_close(g, r, **tol)
    names = set(prof.ops["name"])
    assert {FUSED, FUSED + "_backward"} <= names
    assert not names & {"aten::_softmax", "aten::clone", "aten::repeat_interleave", "aten::bmm"}


def test_grouped_query_decode_reads_each_kv_head_once():
    """A decode step (one query per sequence) over a long cache: the fused GQA op reads K and V
    once, where the math path repeats them per query head (and the time follows)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run(backends):
        with torch.neuron.timing_only():
            q = torch.empty(4, 32, 1, 128, dtype=torch.bfloat16, device="neuron")
            kv = torch.empty(4, 4, 2048, 128, dtype=torch.bfloat16, device="neuron")
            with sdpa_kernel(backends), wb.profile(timing_only=True) as prof:
                F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
        return prof.summary, 2 * kv.nbytes

    fused, kv_bytes = run([SDPBackend.FLASH_ATTENTION, SDPBackend.OVERRIDEABLE])
    math, _ = run([SDPBackend.MATH])
    assert kv_bytes <= fused["hbm_read_bytes"] < 1.1 * kv_bytes
    assert math["hbm_read_bytes"] > 8 * kv_bytes
    assert fused["total_time"] < math["total_time"] / 4


@pytest.mark.parametrize("case", ["dropout", "gqa_without_flag", "mask_needs_grad", "flash_disabled"])
def test_math_path_where_cpu_takes_it(case):
    tensors, kwargs = _qkv(torch.float32), {}
    if case == "gqa_without_flag":    # one KV head broadcast to every query head, no enable_gqa
        tensors = _qkv(torch.float32, heads=(4, 1, 1))
    with wb.profile() as prof:
        if case == "dropout":
            torch.manual_seed(1)
            F.scaled_dot_product_attention(*[t.detach().to("neuron") for t in tensors], dropout_p=0.5)
        elif case == "mask_needs_grad":
            mask = torch.randn(32, 32, device="neuron", requires_grad=True)
            F.scaled_dot_product_attention(*[t.detach().to("neuron") for t in tensors], attn_mask=mask)
        elif case == "flash_disabled":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel(SDPBackend.MATH):
                F.scaled_dot_product_attention(*[t.detach().to("neuron") for t in tensors])
        else:
            out, _ = _run("neuron", tensors, **kwargs)
            ref, _ = _run("cpu", tensors, **kwargs)
            torch.testing.assert_close(out, ref)
    assert FUSED not in set(prof.ops["name"])


def test_fused_path_in_timing_only_mode_costs_one_op():
    with torch.neuron.timing_only(), wb.profile() as prof:
        q = torch.empty(1, 8, 2048, 128, dtype=torch.bfloat16, device="neuron")
        out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert out.shape == (1, 8, 2048, 128)
    rows = prof.ops[prof.ops["name"] == FUSED]
    assert len(rows) == 1 and rows["flops"].iloc[0] > 0


def test_compiled_attention_equals_cpu():
    tensors = _qkv(torch.float32)

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    compiled = torch.compile(attend, backend="neuron")
    out = compiled(*[t.detach().to("neuron") for t in tensors])
    torch.testing.assert_close(out.cpu(), attend(*[t.detach() for t in tensors]))
