"""DMA descriptors follow the contiguous runs of a strided HBM view (issue 12: the Mamba scan
reads and writes ``scan[..., i]``, one 4-byte element every 2 KiB)."""
import pytest

from backend.lowering import lower
from backend.sim import OpRecord, TensorDesc, get_target

TRN1 = get_target("trn1")
CONTIGUOUS = TensorDesc((1, 256, 16), "float32")
LAST_AXIS_SELECT = TensorDesc((1, 256, 16), "float32", (2097152, 8192, 512))   # scan[..., i] of [1,256,16,512]


def _dmas(record):
    return [ins for ins in lower(record, TRN1).instructions if ins.engine == "dma"]


@pytest.mark.parametrize("name", ["aten::copy_", "aten::copy"])
def test_copy_into_a_strided_view_pays_one_descriptor_per_element(name):
    record = OpRecord(0, name, (LAST_AXIS_SELECT, CONTIGUOUS), (LAST_AXIS_SELECT,))
    (dma,) = _dmas(record)
    assert (dma.src, dma.dst, dma.nbytes, dma.descriptors) == ("hbm", "hbm", 16384, 4096)


def test_copy_between_contiguous_tensors_is_one_descriptor():
    (dma,) = _dmas(OpRecord(0, "aten::copy_", (CONTIGUOUS, CONTIGUOUS), (CONTIGUOUS,)))
    assert dma.descriptors == 1


def test_elementwise_load_of_a_strided_view_pays_one_descriptor_per_element():
    strided = _dmas(OpRecord(0, "aten::mul", (LAST_AXIS_SELECT, CONTIGUOUS), (CONTIGUOUS,)))
    plain = _dmas(OpRecord(0, "aten::mul", (CONTIGUOUS, CONTIGUOUS), (CONTIGUOUS,)))
    # loads of input 0, input 1, then the store: 128 partitions x 32 elements per tile
    assert [d.descriptors for d in plain] == [128, 128, 128]
    assert [d.descriptors for d in strided] == [4096, 128, 128]


def test_elementwise_store_into_a_strided_output_pays_one_descriptor_per_element():
    dmas = _dmas(OpRecord(0, "aten::add", (CONTIGUOUS, CONTIGUOUS), (LAST_AXIS_SELECT,)))
    assert [d.descriptors for d in dmas] == [128, 128, 4096]


def test_strided_descriptors_cost_their_overhead_slots():
    """4096 descriptors over 16 engines: 256 per engine, each a 256-byte slot at 17 B/ns on trn1,
    plus 16 KiB / 16 engines of data."""
    from backend.sim.costs.dma import dma_engine_ns
    (dma,) = _dmas(OpRecord(0, "aten::copy_", (LAST_AXIS_SELECT, CONTIGUOUS), (LAST_AXIS_SELECT,)))
    ns = dma_engine_ns(dma.nbytes, dma.descriptors, dma.dma_engines, dma.src, dma.dst, TRN1)
    # (an HBM-to-HBM copy: its bytes cross HBM twice, at most 410 GB/s / 32 per engine)
    assert ns == pytest.approx(1024 / (410 / 32) + 256 * 256 / 17.0)


@pytest.mark.parametrize("name, dim, src_shape, run", [
    ("aten::select_scatter", 3, (1, 256, 16), 1),          # last axis: element runs
    ("aten::select_scatter", 1, (1, 16, 512), 16 * 512),   # a whole [16, 512] plane per run
    ("aten::slice_scatter", 3, (1, 256, 16, 8), 8),
])
def test_scatter_into_a_view_writes_runs_of_the_view(name, dim, src_shape, run):
    base = TensorDesc((1, 256, 16, 512), "float32")
    src = TensorDesc(src_shape, "float32")
    copy, write = _dmas(OpRecord(0, name, (base, src), (base,), {"dim": dim}))
    assert copy.descriptors == 1
    assert write.descriptors == src.numel // run


def test_a_broadcast_input_keeps_the_tiles_rows():
    """An expanded (stride-0) operand is replicated on chip, not gathered one element per descriptor."""
    expanded = TensorDesc((1, 256, 16), "float32", (0, 1, 0))
    assert _dmas(OpRecord(0, "aten::mul", (expanded, CONTIGUOUS), (CONTIGUOUS,)))[0].descriptors == 128


# A transposed view of a contiguous [256, 512] fp32 tensor: logically one 4 B run per element, but
# whole in memory. Kernels load it in memory order and transpose on TensorE, as a compiler does.
PLAIN_2D = TensorDesc((256, 512), "float32")
TRANSPOSED_2D = TensorDesc((256, 512), "float32", (1, 256))


def test_memory_run_and_order_of_a_permuted_view():
    from backend.lowering.data import contiguous_run, in_memory_order_of, loads_transposed, memory_order, memory_run

    assert (contiguous_run(TRANSPOSED_2D), memory_run(TRANSPOSED_2D)) == (1, 256 * 512)
    assert (contiguous_run(LAST_AXIS_SELECT), memory_run(LAST_AXIS_SELECT)) == (1, 1)   # a gather stays one
    assert loads_transposed(TRANSPOSED_2D) and not loads_transposed(LAST_AXIS_SELECT)
    assert not loads_transposed(PLAIN_2D)
    # walked in the memory order of a transposed output, the transposed input is contiguous
    order = memory_order(TRANSPOSED_2D)
    assert in_memory_order_of(order, TRANSPOSED_2D, TRANSPOSED_2D) == TensorDesc((512, 256), "float32", (256, 1))
    assert in_memory_order_of(order, TRANSPOSED_2D, PLAIN_2D) == TensorDesc((512, 256), "float32", (1, 512))
    assert memory_order(PLAIN_2D) is None
    assert in_memory_order_of(memory_order(PLAIN_2D), PLAIN_2D, TRANSPOSED_2D) is TRANSPOSED_2D


def _tensor_ops(record):
    return [ins for ins in lower(record, TRN1).instructions if ins.engine == "tensor"]


def test_elementwise_with_a_transposed_input_transposes_it_on_tensor_engine():
    """Loads of the transposed input take one descriptor per 128-element memory row of a block
    (not one per element), then a TensorE transpose per 128x128 block: 8 blocks."""
    dmas = _dmas(OpRecord(0, "aten::mul", (TRANSPOSED_2D, PLAIN_2D), (PLAIN_2D,)))
    assert [(d.nbytes, d.descriptors) for d in dmas] == [(524288, 1024), (524288, 128), (524288, 128)]
    transposes = _tensor_ops(OpRecord(0, "aten::mul", (TRANSPOSED_2D, PLAIN_2D), (PLAIN_2D,)))
    assert sum(t.repeat for t in transposes if t.opcode == "nc_transpose") == 8


def test_elementwise_walks_a_permuted_output_in_its_memory_order():
    """Operands permuted like the output stream contiguously: no transposes, one run a row."""
    record = OpRecord(0, "aten::add", (TRANSPOSED_2D, TRANSPOSED_2D), (TRANSPOSED_2D,))
    assert [d.descriptors for d in _dmas(record)] == [128, 128, 128]
    assert not _tensor_ops(record)


def test_copy_of_a_transposed_view_loads_memory_rows():
    (load, store) = _dmas(OpRecord(0, "aten::clone", (TRANSPOSED_2D,), (PLAIN_2D,)))
    assert (load.descriptors, store.descriptors) == (1024, 128)


def test_copy_of_an_expanded_view_reads_its_base_once():
    """``x.expand(8, 256, 768).contiguous()`` of a [768] fp32 vector: the 3 KiB base loaded once
    (replicated over partitions), then only the output's bytes are stored, in whole rows."""
    from backend.lowering.data import broadcast_base

    expanded = TensorDesc((8, 256, 768), "float32", (0, 0, 1))
    assert broadcast_base(expanded) == TensorDesc((768,), "float32", (1,))
    assert broadcast_base(PLAIN_2D) is None
    program = lower(OpRecord(0, "aten::clone", (expanded,), (TensorDesc((8, 256, 768), "float32"),)), TRN1)
    dmas = [ins for ins in program.instructions if ins.engine == "dma"]
    load, stores = dmas[0], dmas[1:]
    assert (load.src, load.traffic["hbm_read_bytes"]) == ("hbm", 768 * 4)
    assert sum(d.traffic["hbm_write_bytes"] for d in stores) == 8 * 256 * 768 * 4
    assert all(d.descriptors <= 128 * d.repeat for d in stores)      # a row per partition, not an element
