"""Reductions pick the engine layout a compiler would, from the instruction formulas: outer-axis
sums of few large slices add the slices on VectorE (not a 1-row ones-matmul on TensorE), and a
norm over rows too long for SBUF runs bn_stats per chunk, not per row in every chunk."""
import pytest

from backend.lowering import lower
from backend.sim import OpRecord, TensorDesc, get_target

TRN2 = get_target("trn2")


def _sum(shape, dims):
    x = TensorDesc(shape, "float32")
    out = tuple(1 if d in dims else s for d, s in enumerate(shape))
    return lower(OpRecord(0, "aten::sum", (x,), (TensorDesc(out, "float32"),), {"dim": list(dims), "keepdim": True}),
                 TRN2)


def _ops(program, engine, opcode=None):
    return [i for i in program.instructions if i.engine == engine and (opcode is None or i.opcode == opcode)]


@pytest.mark.parametrize("shape, dims, adds", [
    ((4, 128, 256), (0,), 3),            # a [128, 256]-slice bias-style sum over a small batch
    ((4, 2, 2, 128, 64), (2,), 1),       # GQA's repeat_kv backward: a middle axis of 2
])
def test_few_large_slices_are_added_on_vector_engine(shape, dims, adds):
    program = _sum(shape, dims)
    assert not _ops(program, "tensor")
    (add,) = _ops(program, "vector", "tensor_tensor")
    assert add.repeat % adds == 0 and add.attr("alu") == "add"
    (load,) = [d for d in _ops(program, "dma") if d.src == "hbm"]
    assert load.traffic["hbm_read_bytes"] == 4 * (4 * 128 * 256 if len(shape) == 3 else 4 * 2 * 2 * 128 * 64)


def test_many_short_rows_still_reduce_across_partitions_on_tensor_engine():
    program = _sum((512, 256), (0,))          # a bias gradient over 512 tokens
    # (VectorE may still add the ones-matmul's K-block partial sums out of PSUM)
    slice_adds = [i for i in _ops(program, "vector", "tensor_tensor") if not i.attr("psum_input")]
    assert _ops(program, "tensor", "nc_matmul") and not slice_adds


def test_batch_norm_splits_few_channels_over_partitions_and_runs_bn_stats_per_chunk():
    """Batch norm of [16, 32, 64, 64]: 32 channels split 4 ways fill the 128 partitions, 16,384
    elements a row, too long for SBUF: 32 bn_stats of 512 a row in all (8 in each of 4 chunks),
    not a whole row's worth in every chunk."""
    x, c = TensorDesc((16, 32, 64, 64), "float32"), TensorDesc((32,), "float32")
    program = lower(OpRecord(0, "aten::native_batch_norm", (x, c, c, c, c), (x, c, c), {"training": True}), TRN2)
    stats = _ops(program, "vector", "bn_stats")
    assert sum(i.repeat for i in stats) == 16384 // 512
    assert {i.free_size for i in stats} == {512} and {i.partitions for i in stats} == {128}


def test_batch_norm_backward_takes_channel_rows_and_no_column_matmuls():
    """dweight/dbias of a batch norm are the per-channel row sums the backward already takes."""
    x, c = TensorDesc((16, 32, 64, 64), "float32"), TensorDesc((32,), "float32")
    program = lower(OpRecord(0, "aten::native_batch_norm_backward", (x, x, c, c, c, c, c), (x, c, c),
                             {"train": True, "eps": 1e-5, "output_mask": [True, True, True]}), TRN2)
    assert not _ops(program, "tensor")
    assert {i.partitions for i in _ops(program, "vector", "tensor_reduce")} == {128}


def test_sum_over_a_permuted_view_walks_memory_order():
    """GQA's repeat_kv backward on K's gradient (last two axes transposed): the reduced axis is
    still an outer one in memory, so the slices are added on VectorE, read in whole tile rows,
    and the result is transposed on TensorE to the output's layout."""
    x = TensorDesc((4, 2, 2, 128, 64), "float32", (32768, 16384, 8192, 1, 128))
    program = lower(OpRecord(0, "aten::sum", (x,), (TensorDesc((4, 2, 1, 128, 64), "float32"),),
                             {"dim": [2], "keepdim": True}), TRN2)
    assert not _ops(program, "tensor", "nc_matmul") and _ops(program, "tensor", "nc_transpose")
    load = next(d for d in _ops(program, "dma") if d.src == "hbm")
    assert (load.descriptors, load.nbytes // load.descriptors) == (2 * 128, 512 * 4)   # a 2 KiB row per slice a partition


def test_row_ops_over_a_permuted_view_transpose_their_rows_on_tensor_engine():
    """A softmax over the last axis of ``x.t()``: its rows are columns in memory, so each tile is
    loaded in memory order (512 B a descriptor for fp32) and transposed on TensorE first, where
    it used to be costed as if the rows were contiguous."""
    plain, transposed = TensorDesc((1024, 1024), "float32"), TensorDesc((1024, 1024), "float32", (1, 1024))

    def softmax(x):
        return lower(OpRecord(0, "aten::_softmax", (x,), (plain,), {"dim": -1}), TRN2)

    assert not _ops(softmax(plain), "tensor")
    program = softmax(transposed)
    assert _ops(program, "tensor", "nc_transpose")
    load = next(d for d in _ops(program, "dma") if d.src == "hbm")
    assert load.nbytes // load.descriptors == 128 * 4
