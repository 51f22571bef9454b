"""A kernel called with torch tensors is the op ``nki::<name>``: on CPU and ``neuron`` tensors
eagerly, inside ``torch.compile(backend="neuron")`` graphs, and one kernel in profiles whose
instructions are the kernel's own."""
import torch

import workbench as wb
from workbench import nki
import workbench.nki.language as nl
from benchmarks.fidelity.nki_tutorials.norms import nki_rmsnorm_kernel


def _reference(x, g):
    return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True)) * g


def test_cpu_and_neuron_tensors_give_the_reference_values(neuron):
    x, g = torch.rand(200, 512), torch.rand(512)
    torch.testing.assert_close(nki_rmsnorm_kernel(x, g), _reference(x, g))
    y = nki_rmsnorm_kernel(x.to(neuron), g.to(neuron))
    assert y.device.type == "neuron" and y.dtype == torch.float32
    torch.testing.assert_close(y.cpu(), _reference(x, g))


def test_eager_profile_shows_the_kernel_as_one_op_with_its_own_instructions(neuron):
    x, g = torch.rand(256, 512, device=neuron), torch.rand(512, device=neuron)
    with wb.profile() as prof:
        nki_rmsnorm_kernel(x, g)
    (row,) = prof.ops.itertuples()
    assert row.name.startswith("nki::nki_rmsnorm_kernel") and row.kind == "op"
    simulated = nki_rmsnorm_kernel.simulate(x.cpu().numpy(), g.cpu().numpy(), target="trn2")
    assert row.instruction_count == sum(simulated.instruction_counts.values())
    assert row.tensor_instructions == simulated.instruction_counts["tensor"] == 2


def test_kernel_inside_a_compiled_graph(neuron):
    def f(x, g):
        return nki_rmsnorm_kernel(torch.relu(x) + 1, g) * 2
    x, g = torch.randn(256, 512), torch.rand(512)
    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    with wb.profile() as prof:
        out = compiled(x.to(neuron), g.to(neuron))
    torch.testing.assert_close(out.cpu(), f(x, g))
    kernels = [r for r in prof.ops.itertuples() if "nki_rmsnorm_kernel" in r.name]
    assert len(kernels) == 1 and kernels[0].kind == "kernel" and kernels[0].tensor_instructions == 2


def test_bf16_tensors_keep_their_dtype(neuron):
    @nki.jit
    def double(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(x), 2.0))
        return out
    x = torch.randn(128, 64, dtype=torch.bfloat16)
    y = double(x.to(neuron))
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.cpu(), x * 2)


def test_a_kernel_error_reaches_the_caller_and_the_device_stays_usable(neuron):
    @nki.jit
    def too_tall(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out
    try:
        too_tall(torch.rand(256, 4, device=neuron))
    except nki.NKIError as err:
        assert err.code == "err_num_partition_exceed_arch_limit"
    else:
        raise AssertionError("expected an NKIError")
    assert (torch.ones(3, device=neuron) + 1).cpu().tolist() == [2.0, 2.0, 2.0]


def test_timing_only_tensors_cost_the_same_kernel(neuron):
    x, g = torch.rand(256, 512, device=neuron), torch.rand(512, device=neuron)
    with wb.profile() as with_values:
        nki_rmsnorm_kernel(x, g)
    with torch.neuron.timing_only():
        xt, gt = torch.rand(256, 512, device=neuron), torch.rand(512, device=neuron)
        with wb.profile() as shapes_only:
            y = nki_rmsnorm_kernel(xt, gt)
    assert y.shape == (256, 512)
    (a,), (b,) = with_values.ops.itertuples(), shapes_only.ops.itertuples()
    assert (a.name, a.instruction_count, a.time_ns) == (b.name, b.instruction_count, b.time_ns)
