"""Attention lowering: how operands move (descriptor runs) and what a head holds in SBUF."""
from backend.lowering import lower
from backend.lowering.attention import head_run_bytes
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.scheduler import Simulator


def _sdpa(heads: int, seq: int, causal: bool = False, queries: int | None = None, d: int = 64) -> OpRecord:
    q = TensorDesc((1, heads, seq if queries is None else queries, d), "bfloat16")
    k = TensorDesc((1, heads, seq, d), "bfloat16")
    return OpRecord(0, "aten::_scaled_dot_product_flash_attention_for_cpu", (q, k, k),
                    (q, TensorDesc(q.shape[:-1], "float32")), {"is_causal": causal})


def test_unmasked_rows_move_in_one_run_per_partition():
    assert head_run_bytes((1, 8, 4160, 128), 2, causal=False) == 33 * 256       # ceil(4160 / 128) rows of 256 B
    assert head_run_bytes((1, 8, 4160, 128), 2, causal=True) == 256              # tiles in sequence order: a row each
    assert head_run_bytes((1, 1, 100, 64), 2, causal=False) == 128               # one row per partition
    for causal, descriptors in ((False, 128), (True, 512)):
        program = lower(_sdpa(1, 512, causal), "trn1")
        k_load = [i for i in program.instructions if i.engine == "dma"][1]
        assert (k_load.nbytes, k_load.descriptors) == (512 * 64 * 2, descriptors)


def test_forward_holds_only_the_transposes_of_q_and_k():
    # per head: Q, K, V 3 x 16 KiB, O 16 KiB + logsumexp 512 B, P 128 x 128 bf16 = 32 KiB; 2 heads in flight
    program = lower(_sdpa(2, 128), "trn1")
    assert program.info.sbuf_peak_bytes == 2 * ((3 * 16384 + 16384 + 512) + 32768)


def test_decode_heads_against_a_long_cache_overlap():
    """8 heads of one query over 4,160 keys (the TP32 Llama decode shard) fit a full pipeline in
    trn1's SBUF once loaded K tiles are not held beside K^T."""
    def elapsed(heads: int) -> float:
        op = Simulator("trn1").run(lower(_sdpa(heads, 4160, queries=1, d=128), "trn1")).ops[0]
        return op.end_ns - op.start_ns
    assert elapsed(8) < 4 * elapsed(1)
