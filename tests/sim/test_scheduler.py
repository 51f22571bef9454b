"""Golden timings for tiny programs, and scheduler invariants."""
import pytest

from backend.sim import Instruction, Program, Simulator, assumptions, get_target

TRN1, TRN2 = get_target("trn1"), get_target("trn2")
VEC = 572 / 0.96            # trn2 tensor_scalar fp32, N=1024: 1024/2 + 60 cycles at 0.96 GHz
ACT = 572 / 1.2             # trn2 activation fp32, N=512
DEP_SCALAR = 100 / 1.2      # semaphore wait on ScalarE
# 32 KiB HBM->SBUF on one trn2 engine: bytes at the engine's slice of the core's HBM share
# (362.5 GB/s / 16 engines = 22.66 B/ns, just under its own 23 B/ns) + one 256 B slot per descriptor
DMA32K = 32768 / (362.5 / 16) + 4 * 256 / 23


def vector_instruction(**kw):
    return Instruction("vector", "tensor_scalar", free_size=1024, **kw)


def scalar_instruction(**kw):
    return Instruction("scalar", "activation", free_size=512, **kw)


def dma32k(**kw):
    return Instruction("dma", "dma_copy", nbytes=32768, descriptors=4, dma_engines=1, src="hbm", dst="sbuf", **kw)


def run(target, *instrs, **program_kw):
    program = Program("p", **program_kw)
    for ins in instrs:
        program.add(ins)
    return Simulator(target).run(program)


def test_independent_engines_overlap():
    trace = run(TRN2, vector_instruction(), scalar_instruction())
    assert trace.total_time_ns == pytest.approx(VEC)
    assert [(e.engine, e.start_ns) for e in trace.events] == [("vector", 0.0), ("scalar", 0.0)]


def test_dependency_waits_and_pays_semaphore():
    trace = run(TRN2, vector_instruction(), scalar_instruction(deps=(0,)))
    scalar = trace.events[1]
    assert scalar.start_ns == pytest.approx(VEC)
    assert trace.total_time_ns == pytest.approx(VEC + ACT + DEP_SCALAR)


def test_dma_start_latency_paid_once_per_queued_burst():
    assert run(TRN2, dma32k()).total_time_ns == pytest.approx(1300 + DMA32K)
    assert run(TRN2, dma32k(repeat=3)).total_time_ns == pytest.approx(1300 + 3 * DMA32K)
    # a second transfer on another engine overlaps the first
    two = run(TRN2, dma32k(), dma32k())
    assert two.total_time_ns == pytest.approx(1300 + DMA32K)
    assert {e.engine for e in two.events} == {"dma0", "dma1"}


def test_transfer_spans_engines_per_8_partitions():
    trace = run(TRN2, Instruction("dma", "dma_copy", nbytes=128 * 1024, descriptors=128, dma_engines=16,
                                  src="hbm", dst="sbuf"))
    assert len(trace.events) == 16 and all(e.bytes_moved == 8192 for e in trace.events)


def test_port_conflicts_only_on_nc_v2():
    gp = Instruction("gpsimd", "iota", free_size=1000)
    v = Instruction("vector", "tensor_copy", free_size=1000)
    t1 = run(TRN1, v, gp)
    assert t1.total_time_ns == pytest.approx(1060 / 1.12 + 1210 / 1.4)
    t2 = run(TRN2, Instruction("vector", "tensor_copy", free_size=1000), Instruction("gpsimd", "iota", free_size=1000))
    assert t2.total_time_ns == pytest.approx(max((500 + 60) / 0.96, 1210 / 1.2))
    # Vector and Scalar only conflict when both touch PSUM
    vp = Instruction("vector", "tensor_copy", free_size=1000, src="psum")
    sp = Instruction("scalar", "activation", free_size=1000, src="psum")
    assert run(TRN1, vp, sp).total_time_ns == pytest.approx(1060 / 1.12 + 1060 / 1.4)
    ss = Instruction("scalar", "activation", free_size=1000)
    assert run(TRN1, Instruction("vector", "tensor_copy", free_size=1000, src="psum"), ss).total_time_ns == \
        pytest.approx(1060 / 1.12)


def test_late_store_does_not_block_an_unrelated_load():
    long = Instruction("vector", "tensor_copy", free_size=20000)
    store = Instruction("dma", "dma_copy", nbytes=32768, descriptors=4, dma_engines=16, src="sbuf", dst="hbm",
                        deps=(0,))
    trace = run(TRN2, long, store, dma32k())
    load = [e for e in trace.events if e.op_index == 0 and e.engine.startswith("dma")][-1]
    assert load.start_ns == pytest.approx(1300)


def test_launch_overhead_runs_ahead_until_a_sync():
    sim = Simulator(TRN2)
    for _ in range(2):
        p = Program("op", launch_overhead_ns=5000.0)
        p.add(vector_instruction())
        sim.feed(p)
    a, b = sim.trace.ops
    assert (a.start_ns, b.start_ns) == (5000.0, 10000.0)        # launch-bound
    sim = Simulator(TRN2)
    first = Program("read", launch_overhead_ns=5000.0, sync=True)
    first.add(Instruction("vector", "tensor_copy", free_size=20000))
    sim.feed(first)
    second = Program("op", launch_overhead_ns=5000.0)
    second.add(vector_instruction())
    s = sim.feed(second)
    assert s.start_ns == pytest.approx(sim.trace.ops[0].end_ns + 5000.0)


def test_views_take_no_time_and_ops_run_back_to_back():
    sim = Simulator(TRN2)
    p = Program("op")
    p.add(vector_instruction())
    sim.feed(p)
    v = sim.feed(Program("aten::view", "view"))
    sim.feed(p)
    ops = sim.trace.ops
    assert v.time_ns == 0 and v.start_ns == ops[0].end_ns
    assert ops[2].start_ns == pytest.approx(ops[0].end_ns)
    assert [op.op_index for op in ops] == [0, 1, 2]


def test_event_bound_and_tracks():
    program = Program("many")
    for _ in range(10):
        program.add(vector_instruction())
    trace = Simulator(TRN2, max_events=3).run(program)
    assert len(trace.events) == 3 and trace.events_dropped == 7
    assert trace.ops[0].instruction_count == 10
    assert trace.engines[:5] == ("tensor", "vector", "scalar", "gpsimd", "dma0")
    assert trace.engines[-1] == "host" and len(trace.engines) == 4 + 16 + 1


def test_program_rejects_bad_instructions():
    p = Program("bad")
    with pytest.raises(ValueError, match="earlier"):
        p.add(vector_instruction(deps=(0,)))
    with pytest.raises(ValueError, match="engine"):
        p.add(Instruction("npu", "x"))
    with pytest.raises(ValueError, match="repeat"):
        p.add(vector_instruction(repeat=0))
    with pytest.raises(ValueError, match="kind"):
        Program("x", "warp")


def test_summary_rollup():
    trace = run(TRN2, vector_instruction(repeat=4, flops=4096, traffic={"sbuf_read_bytes": 100}),
                scalar_instruction(deps=(0,)), dma32k())
    s = trace.summary()
    assert s["instruction_count"] == 6
    assert (s["vector_instruction_count"], s["scalar_instruction_count"], s["dma_instruction_count"]) == (4, 1, 1)
    assert s["sbuf_read_bytes"] == 100
    for key, value in s.items():
        if key.endswith("_percent"):
            assert 0.0 <= value <= 100.0, key
    assert s["vector_engine_active_time_percent"] == pytest.approx(100 * 4 * VEC / trace.total_time_ns)


def tiny_load(**kw):
    return Instruction("dma", "dma_copy", nbytes=512, descriptors=1, dma_engines=1, src="hbm", dst="sbuf", **kw)


TINY = 512 / (362.5 / 16) + 256 / 23          # one 512 B descriptor on one trn2 engine


def test_dma_issue_cost_bounds_how_fast_small_transfers_follow_each_other():
    with assumptions.overridden({"dma.issue_ns": 600.0, "dma.issue_queues": 2}):
        # a lone transfer hides its issue inside the 1.3 us start latency
        assert run(TRN2, tiny_load()).total_time_ns == pytest.approx(1300 + TINY)
        # six on two issuing queues: the third pair is issued at 3 x 600 ns, after the latency
        assert run(TRN2, *[tiny_load() for _ in range(6)]).total_time_ns == pytest.approx(3 * 600 + TINY)
        # repeated instructions are issued one after another: the last transfer waits for its issue
        assert run(TRN2, tiny_load(repeat=4)).total_time_ns == pytest.approx(1300 + 3 * 600 + TINY)
        # large transfers hide the issue cost entirely
        assert run(TRN2, dma32k(repeat=3)).total_time_ns == pytest.approx(1300 + 3 * DMA32K)
    with assumptions.overridden({"dma.issue_ns": 300.0, "dma.issue_queues": 1}):
        assert run(TRN2, *[tiny_load() for _ in range(6)]).total_time_ns == pytest.approx(6 * 300 + TINY)
        # NC-v2 has no hardware DGE: its descriptors are prepared before the program runs
        assert run(TRN1, *[tiny_load() for _ in range(6)]).total_time_ns == pytest.approx(1300 + (512 + 256) / 17)


def _kernel_pair(kind: str, prefetch_bytes: int, producer_sbuf: int = 0):
    producer = Program("a", kind, sbuf_peak_bytes=producer_sbuf)
    producer.add(vector_instruction(repeat=10))
    consumer = Program("b", kind, prefetch_bytes=prefetch_bytes)
    load = consumer.add(dma32k())
    consumer.add(vector_instruction(deps=(load,)))
    return Simulator(TRN2).run([producer, consumer])


DEP_VECTOR = 100 / 0.96


def test_compiled_kernel_prefetches_its_loads_while_the_previous_kernel_computes():
    # compiled: the load runs under the producer's 10 vector instructions
    trace = _kernel_pair("kernel", prefetch_bytes=32768)
    load = next(e for e in trace.events if e.engine.startswith("dma"))
    assert load.start_ns == pytest.approx(1300) and trace.ops[1].start_ns == pytest.approx(10 * VEC)
    assert trace.total_time_ns == pytest.approx(11 * VEC + DEP_VECTOR)
    # eager ops, kernels without prefetchable inputs, and kernels after a producer that fills SBUF wait
    serial = 10 * VEC + 1300 + DMA32K + VEC + DEP_VECTOR
    assert _kernel_pair("op", prefetch_bytes=32768).total_time_ns == pytest.approx(serial)
    assert _kernel_pair("kernel", prefetch_bytes=0).total_time_ns == pytest.approx(serial)
    full = TRN2.sbuf_usable_bytes - 1024
    assert _kernel_pair("kernel", prefetch_bytes=32768, producer_sbuf=full).total_time_ns == pytest.approx(serial)


def test_a_run_of_transfers_takes_the_gaps_around_a_transfer_placed_earlier():
    """Ten queued 32 KiB loads meet a store already placed on every engine: they run before and
    after it, instead of all waiting for it. The engine serves its queues round robin, a
    descriptor at a time, so the run fills the whole gap before the store."""
    long = Instruction("vector", "tensor_copy", free_size=20000)
    store = Instruction("dma", "dma_copy", nbytes=32768 * 16, descriptors=64, dma_engines=16, src="sbuf",
                        dst="hbm", deps=(0,))
    trace = run(TRN2, long, store, dma32k(repeat=10))
    dma0 = sorted((e for e in trace.events if e.engine == "dma0"), key=lambda e: e.start_ns)
    before, stored, after = dma0
    assert stored.bytes_moved == 32768 and before.end_ns <= stored.start_ns and after.start_ns == stored.end_ns
    assert (before.end_ns - before.start_ns) + (after.end_ns - after.start_ns) == pytest.approx(10 * DMA32K)
    assert before.bytes_moved + after.bytes_moved == 10 * 32768
    assert before.end_ns == stored.start_ns and before.end_ns - before.start_ns > 7 * DMA32K


def test_timeline_merges_back_to_back_intervals_and_still_finds_gaps():
    """Touching busy intervals are kept as one (a long run of independent loads stays cheap to
    place), without changing where new work fits."""
    from backend.sim.scheduler import _Timeline

    line = _Timeline()
    for k in range(100):
        begin, at = line.earliest(0.0, 10.0)
        assert begin == 10.0 * k
        line.reserve(begin, 10.0, at)
    assert (line.starts, line.ends) == ([0.0], [1000.0])
    begin, at = line.earliest(1500.0, 10.0)
    line.reserve(begin, 10.0, at)                   # a gap 1000..1500 stays open
    assert line.earliest(0.0, 500.0)[0] == 1000.0 and line.earliest(0.0, 501.0)[0] == 1510.0
    line.reserve_pieces([(1000.0, 1500.0)])         # filling it joins all three
    assert (line.starts, line.ends) == ([0.0], [1510.0])


def test_a_transfer_interleaves_with_a_small_store_on_its_engine():
    """A 16-engine load issued after a 1-engine store (a GEMV's 2 KiB output) does not wait for
    one unbroken slot behind it on that engine: it takes the gap before the store and goes on
    after it, so it ends one store later than on the other engines, not a whole load later."""
    long = Instruction("vector", "tensor_copy", free_size=5000)
    store = Instruction("dma", "dma_copy", nbytes=2048, descriptors=1, dma_engines=1, src="sbuf", dst="hbm",
                        deps=(0,))
    load = Instruction("dma", "dma_copy", nbytes=16 * 2**20, descriptors=128, dma_engines=16, src="hbm", dst="sbuf")
    trace = run(TRN2, long, store, load)
    stored = next(e for e in trace.events if e.bytes_moved == 2048)
    loaded_on_store_engine = [e for e in trace.events if e.engine == stored.engine and e is not stored]
    ends: dict = {}
    for e in trace.events:
        if e.engine.startswith("dma") and e is not stored:
            ends[e.engine] = max(ends.get(e.engine, 0.0), e.end_ns)
    assert len(loaded_on_store_engine) == 2 and len(ends) == 16       # before and after the store
    assert max(ends.values()) - min(ends.values()) == pytest.approx(stored.end_ns - stored.start_ns)


def test_a_named_dma_queue_runs_its_transfers_in_order_at_its_transfer_rate():
    # trn1: no hardware DGE, so only the queue paces. Six tiny loads on 16 engines, no queue named:
    # the compiler's spread, all under one start latency
    spread = run(TRN1, *[tiny_load() for _ in range(6)]).total_time_ns
    assert spread == pytest.approx(1300 + (512 + 256) / 17)
    with assumptions.overridden({"dma.queue_transfer_ns": 1000.0}):
        # the same six on one queue: one every 1000 ns, the last one's bytes after its start
        paced = run(TRN1, *[tiny_load(dma_queue=0) for _ in range(6)]).total_time_ns
        assert paced == pytest.approx(1300 + 5 * 1000 + (512 + 256) / 17)
        # a lone transfer costs what it did; two queues run side by side, each in its own order
        assert run(TRN1, tiny_load(dma_queue=3)).total_time_ns == pytest.approx(spread)
        two = run(TRN1, *[tiny_load(dma_queue=q % 2) for q in range(6)]).total_time_ns
        assert two == pytest.approx(1300 + 2 * 1000 + (512 + 256) / 17)
        # a transfer longer than the queue's rate holds the next one until it ends (in order)
        big = [Instruction("dma", "dma_copy", nbytes=128 * 32768, descriptors=128, dma_engines=16, src="hbm",
                           dst="sbuf", dma_queue=0) for _ in range(3)]
        one = run(TRN1, big[0]).total_time_ns - 1300
        assert one > 1000
        assert run(TRN1, *big).total_time_ns == pytest.approx(1300 + 3 * one)
