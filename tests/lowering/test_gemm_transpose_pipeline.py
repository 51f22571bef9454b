"""GEMMs whose operand is transposed on TensorE: the transposes are software-pipelined.

A decode-shaped GEMV ``x[1, K] @ W.t()`` with ``W[N, K]`` stored row-major (nn.Linear's weight)
transposes W on TensorE in 128x128 blocks. TensorE runs its queue in order, so the lowering
prepares the next step's transposes before this step's matmuls; a loaded block's buffer is
free once it is transposed; the transposed copies out of PSUM are shared by ScalarE and VectorE.
"""
from backend.lowering import lower
from backend.sim import OpRecord, Simulator, TensorDesc as T, get_target


def _gemv(k=4096, n=2048, target="trn2"):
    weight_t = T((k, n), "bfloat16", strides=(1, k))          # W[N, K] used as W.t()
    return lower(OpRecord(0, "aten::mm", (T((1, k), "bfloat16"), weight_t), (T((1, n), "bfloat16"),), {}),
                 get_target(target))


def test_next_steps_transposes_are_queued_before_this_steps_matmuls():
    program = _gemv()
    tensor_queue = [ins.opcode for ins in program.instructions if ins.engine == "tensor"]
    steps = tensor_queue.count("nc_matmul")
    assert steps >= 2
    # step 0's transposes, then each step's matmuls after the next step's transposes
    assert tensor_queue == ["nc_transpose"] + ["nc_transpose", "nc_matmul"] * (steps - 1) + ["nc_matmul"]


def test_a_loaded_block_is_free_after_its_transposes_and_copies_wait_for_their_buffer():
    ins = _gemv().instructions
    transposes = [i for i, x in enumerate(ins) if x.opcode == "nc_transpose"]
    matmuls = [i for i, x in enumerate(ins) if x.opcode == "nc_matmul"]
    loads = [i for i, x in enumerate(ins) if x.engine == "dma" and x.src == "hbm" and len(ins[i + 1:]) and
             ins[i + 1].opcode == "nc_transpose"]
    # step 2's weight load reuses step 0's buffer: it waits for step 0's transposes only
    assert ins[loads[2]].deps == (transposes[0],)
    # step 2's transposed copies reuse step 0's transposed buffer: they wait for its matmuls
    copies = [i for i, x in enumerate(ins) if x.opcode == "tensor_copy" and x.deps and transposes[2] in x.deps]
    assert [ins[i].engine for i in copies] == ["scalar", "vector"]
    assert all(ins[i].deps == (matmuls[0], transposes[2]) for i in copies)
    assert ins[copies[0]].repeat == ins[copies[1]].repeat          # shared evenly


def test_transposes_and_psum_copies_overlap_across_steps():
    op = Simulator(get_target("trn2")).run(_gemv()).ops[0]
    # serialised, the op would take at least TensorE's and ScalarE's busy time added up
    assert op.time_ns < op.busy_ns["tensor"] + op.busy_ns["scalar"]
    assert op.time_ns >= op.busy_ns["tensor"]


def test_nc_v2_keeps_transposed_copies_on_scalar_engine():
    # VectorE and ScalarE share one PSUM port on NC-v2: splitting the copies would not help
    ins = _gemv(target="trn1").instructions
    transposes = {i for i, x in enumerate(ins) if x.opcode == "nc_transpose"}
    assert {x.engine for x in ins if x.opcode == "tensor_copy" and transposes & set(x.deps)} == {"scalar"}
