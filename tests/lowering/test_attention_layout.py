"""Attention lowering: how operands move (descriptor runs) and what a head holds in SBUF."""
from backend.lowering import lower
from backend.lowering.attention import head_run_bytes
from backend.sim.descriptors import OpRecord, TensorDesc
from backend.sim.scheduler import Simulator
from backend.sim import get_target
from math import ceil


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


def test_long_causal_heads_walk_query_blocks_and_stay_within_sbuf():
    """One head (the TP32 Llama shard) at 8,192 tokens: P for all its queries (8192 x 4160 bf16,
    65 MiB) cannot sit in SBUF, so the head's queries go in blocks that pipeline; K and V are held
    once for all of them."""
    from backend.lowering.attention import _blocking
    target_room = 22 * 2**20
    # 64 tiles of queries; a head holds 4 MiB of K/V, 69 MiB of query-side bytes: the fewest blocks
    # that hold a full 8-stage pipeline are 32 (8 x 2.2 MiB + 4 MiB)
    plan = _blocking(1, 64, 8, target_room, 4 * 2**20, 69 * 2**20)
    assert (plan.splits, plan.in_flight, len(plan.sizes)) == (32, 8, 32)
    assert plan.sbuf_bytes(8) == 8 * ceil(69 * 2**20 / 32) + 4 * 2**20
    # heads that fit whole are not split
    assert _blocking(8, 4, 8, target_room, 2**20, 2**20).splits == 1
    program = lower(_sdpa(1, 8192, causal=True, d=128), "trn1")
    op = Simulator("trn1").run(program).ops[0]
    busy = max(op.busy_ns.get(e, 0.0) for e in ("tensor", "vector", "scalar", "gpsimd"))
    assert program.info.sbuf_peak_bytes <= get_target("trn1").sbuf_usable_bytes
    assert op.end_ns - op.start_ns < 1.5 * busy


def _gqa(heads: int, kv_heads: int, queries: int, keys: int, causal: bool = False, d: int = 128) -> OpRecord:
    q = TensorDesc((2, heads, queries, d), "bfloat16")
    kv = TensorDesc((2, kv_heads, keys, d), "bfloat16")
    return OpRecord(0, "aten::_scaled_dot_product_fused_attention_overrideable", (q, kv, kv),
                    (q, TensorDesc(q.shape[:-1], "float32")), {"is_causal": causal})


def _loaded_bytes(program) -> int:
    return sum(i.nbytes * i.repeat for i in program.instructions if i.engine == "dma" and i.src == "hbm")


def test_grouped_query_attention_reads_each_kv_head_once():
    """8 query heads per KV head: K and V cross HBM once, as many bytes as with one query head per
    KV head, for decode and for causal prefill alike."""
    for queries, keys, causal in ((1, 4096, False), (512, 512, True)):
        grouped = lower(_gqa(32, 4, queries, keys, causal), "trn2")
        q_bytes, kv_bytes = 2 * 32 * queries * 128 * 2, 2 * 2 * 4 * keys * 128 * 2
        assert _loaded_bytes(grouped) == q_bytes + kv_bytes


def test_grouped_decode_stacks_the_group_into_one_head():
    """A decode step's group of 8 queries shares one KV head: it costs about what one query head
    per KV head costs (the group fills the stationary columns one query leaves empty), not 8x."""
    def elapsed(record) -> float:
        op = Simulator("trn2").run(lower(record, "trn2")).ops[0]
        return op.end_ns - op.start_ns
    grouped, one_per_kv_head = elapsed(_gqa(32, 4, 1, 4096)), elapsed(_gqa(4, 4, 1, 4096))
    repeated = elapsed(_gqa(32, 32, 1, 4096))
    assert grouped < 1.5 * one_per_kv_head
    assert repeated > 4 * grouped
