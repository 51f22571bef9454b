"""scaled_dot_product_attention on the device: the fused path where CPU runs its flash kernel
(values and gradients equal CPU's), the math path where CPU takes it, in timing-only mode and
under torch.compile."""
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


@pytest.mark.parametrize("case", ["dropout", "gqa", "mask_needs_grad", "flash_disabled"])
def test_math_path_where_cpu_takes_it(case):
    tensors, kwargs = _qkv(torch.float32), {}
    if case == "gqa":
        tensors, kwargs = _qkv(torch.float32, heads=(4, 2, 2)), {"enable_gqa": True}
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
