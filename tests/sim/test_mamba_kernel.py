"""The fused-Mamba tutorial kernels run from their source (benchmarks/fidelity/mamba_kernel.py):
what each loop emits and what one iteration costs, pinned on tiny shapes, not on the anchors."""
import pytest

from backend.sim import Simulator, get_target
from backend.sim.costs import instruction_ns
from benchmarks.fidelity.mamba_kernel import MambaCase, mamba_kernel_ns, mamba_kernel_program

TRN1 = get_target("trn1")


def _case(variant: str, seq: int = 512, channels: int = 128, state: int = 1) -> MambaCase:
    return MambaCase(variant, 1, seq, channels, state, published_ns=1.0, vector_active=1.0)


def _ops(program, engine: str, opcode: str | None = None) -> list:
    return [i for i in program.instructions if i.engine == engine and (opcode is None or i.opcode == opcode)]


def test_one_v1_iteration_emits_the_tutorial_calls():
    """memset, 5 loads (delta, A, u, B, C), exp on ScalarE, 2 TensorE broadcasts, 4 VectorE
    tensor_tensor ops (deltaU, deltaBu, scanC, accumulate) and the scan, one store."""
    program = mamba_kernel_program(_case("v1"), TRN1, hoist_delta_u=False)
    assert len(_ops(program, "dma")) == 6
    assert [i.opcode for i in _ops(program, "scalar")] == ["activation"]
    assert all(i.partitions == 1 and i.stationary_free == 128 for i in _ops(program, "tensor"))
    alus = [i.attr("alu") for i in _ops(program, "vector", "tensor_tensor")]
    assert alus == ["multiply", "multiply", "multiply", "add"]
    assert [bool(i.attr("psum_input")) for i in _ops(program, "vector", "tensor_tensor")] == \
        [False, True, True, False]
    assert [i.attr("alu") for i in _ops(program, "vector", "tensor_tensor_scan")] == ["multiply+add"]


def test_vector_cost_of_one_iteration_is_8n_plus_overheads():
    """fp32 SBUF x SBUF ops at 2N, the two PSUM-broadcast products at N (NKI ISA), each plus the
    60-cycle access overhead, at trn1's 1.12 GHz VectorE clock."""
    program = mamba_kernel_program(_case("v1"), TRN1, hoist_delta_u=False)
    ns = sum(instruction_ns(i, TRN1) for i in _ops(program, "vector") if i.opcode.startswith("tensor_tensor"))
    assert ns == pytest.approx((3 * (1024 + 60) + 2 * (512 + 60)) / 1.12)


def test_hoisting_delta_u_runs_it_once_per_channel_tile():
    for variant, per_state in (("v2", 4), ("v3", 4 * 4)):
        case = _case(variant, seq=2048, state=3)
        as_written = len(_ops(mamba_kernel_program(case, TRN1, False), "vector", "tensor_tensor"))
        hoisted = len(_ops(mamba_kernel_program(case, TRN1, True), "vector", "tensor_tensor"))
        assert as_written == 3 * per_state
        assert hoisted == as_written - (3 - 1) * per_state // 4


def test_v1_cannot_hoist_because_it_reloads_its_inputs_per_state():
    case = _case("v1", state=3)
    assert mamba_kernel_ns(case, TRN1, True) == mamba_kernel_ns(case, TRN1, False)


def test_v3_scan_carries_across_seq_tiles():
    """Each 512-wide scan takes the previous tile's last column as ``initial`` (copied into
    ``scan_init``): they chain, in order, on VectorE."""
    program = mamba_kernel_program(_case("v3", seq=1536), TRN1, hoist_delta_u=False)
    index = {id(i): k for k, i in enumerate(program.instructions)}
    scans = [index[id(i)] for i in _ops(program, "vector", "tensor_tensor_scan")]
    copies = [index[id(i)] for i in _ops(program, "vector", "tensor_copy")]
    assert len(scans) == 3 and all(i.free_size == 512 for i in _ops(program, "vector", "tensor_tensor"))
    assert [i.free_size for i in _ops(program, "vector", "tensor_copy")] == [1, 1, 1]
    assert scans[0] < copies[0] < scans[1] < copies[1] < scans[2]


def test_channel_tiles_extrapolate_from_one_and_two():
    """v2's channel tiles are independent: 4 tiles simulated whole match the 1-and-2 extrapolation
    within the small overlap at the ends."""
    case = _case("v2", channels=512, state=2)
    whole = Simulator(TRN1).run(mamba_kernel_program(case, TRN1, True)).total_time_ns
    assert mamba_kernel_ns(case, TRN1, True) == pytest.approx(whole, rel=0.02)


def test_channels_must_fill_partitions():
    with pytest.raises(ValueError, match="multiple of 128"):
        mamba_kernel_program(_case("v1", channels=200), TRN1, False)
