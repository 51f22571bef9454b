"""The fidelity table keeps every row (unrun ones with their reason) and formats ratios and bands."""
from backend.sim.sensitivity import TimeBand
from benchmarks.fidelity import table
import pytest

from benchmarks.fidelity import kernels
from benchmarks.fidelity.kernels import TUTORIAL_VARIANTS
from backend.sim import get_target


def test_rows_format_ratio_bracket_and_band():
    timed = table.Row("a", 2e6, 4e6, TimeBand(2e6, 1.5e6, 3e6))
    bracket = table.Row("b", 1e6, 2e6, TimeBand(1e6, 1e6, 4e6), predicted_high_ns=3e6)
    closed = table.Row("c", 1e6, 2e6, predicted_high_ns=1e6)
    unrun = table.Row("d", None, 9.95e6, note="needs scale-out (issue 13)")
    assert (timed.ratio, timed.band_text) == ("0.500", "1.5 ms-3 ms")
    assert (bracket.predicted, bracket.ratio) == ("1 ms..3 ms", "0.50..1.50")
    assert (closed.predicted, closed.ratio) == ("1 ms", "0.500")
    text = table.format_table([timed, bracket, closed, unrun])
    assert [c.strip() for c in text.splitlines()[0].split(" | ")][:4] == ["workload", "predicted", "published", "ratio"]
    assert "not run" in text and "d: needs scale-out (issue 13)" in text


def test_gpu_rows_are_the_gpu_model_rows_as_times(monkeypatch):
    from benchmarks import gpu_gemm
    monkeypatch.setattr(gpu_gemm, "gpu_fidelity_rows", lambda: [
        {"workload": "A100 gemm", "hardware": "a100", "predicted_ns": 2.0, "published_ns": 1.0, "source": "x"}])
    (row,) = table.gpu_rows()
    assert (row.workload, row.ratio, row.note) == ("A100 gemm (a100)", "2.000", "x")


def test_tutorial_variants_simulate_one_outer_iteration():
    # naive: one output tile of 512; hoisted: one M tile of 32; M/N blocking: one 2-tile M block of 16
    trn1 = get_target("trn1")
    repeats, programs = {}, {}
    for name in TUTORIAL_VARIANTS:
        programs[name], repeats[name] = kernels.variant_program(name, trn1)
    assert repeats == {"naive tiled": 512, "hoisted loads": 32, "M/N blocking": 16}
    matmuls = sum(i.repeat for i in programs["M/N blocking"].instructions if i.opcode == "nc_matmul")
    assert matmuls * repeats["M/N blocking"] == 32 * 16 * 64          # every [128 x 512] tile, all 64 K steps


def test_tutorial_kernels_hbm_traffic_matches_their_loops():
    # naive: per output tile (512) and K step (64), a [128, 128] lhsT and a [128, 512] rhs tile;
    # hoisted: per M tile (32) its lhsT column once and the whole rhs; M/N: per 2-tile M block (16);
    # every variant stores the [4096, 8192] result once. bf16 throughout.
    trn1, kib, result = get_target("trn1"), 1024, 4096 * 8192 * 2
    traffic = {name: kernels.tutorial_variant_hbm_bytes(name, trn1) for name in TUTORIAL_VARIANTS}
    assert traffic == {"naive tiled": 512 * 64 * (32 + 128) * kib + result,
                       "hoisted loads": 32 * (64 * 32 + 16 * 64 * 128) * kib + result,
                       "M/N blocking": 16 * (2 * 64 * 32 + 8 * 2 * 64 * 128) * kib + result}
    # fully optimised (16/2/8 tiles per block): per N block (8) and K block (8), a 2 MiB rhs block
    # and two 4 MiB lhsT blocks
    assert kernels.optimised_hbm_bytes() == 8 * 8 * (2 + 2 * 4) * 2**20 + result


@pytest.mark.slow
def test_tutorial_gap_note_states_the_published_rates():
    # the four published latencies over the traffic above: 103-106 GB/s (issue 12)
    assert table._tutorial_gap(get_target("trn1")).startswith("all four tutorial kernels run at 103-106 GB/s")


def test_tutorial_loads_are_one_transfer_per_tile_so_stores_do_not_hold_the_next_block():
    # hoisted loads: 64 lhsT tiles, then per N tile (16) 64 rhs tiles and one store, each its own transfer
    # of 256 B / 1 KiB rows (the operands' rows, not the traced slice's); with two buffers the next
    # column's loads fill the engines around the store, so the bracket stays open
    trn1 = get_target("trn1")
    program, _ = kernels.variant_program("hoisted loads", trn1, True)
    loads = [i for i in program.instructions if i.opcode == "dma_copy" and i.src == "hbm"]
    assert (len(loads), {i.repeat for i in loads}) == (64 + 16 * 64, {1})
    assert {i.nbytes // i.descriptors for i in loads} == {256, 1024}
    two, one = (kernels.tutorial_variant_ns("hoisted loads", trn1, prefetch) for prefetch in (True, False))
    assert two < one


def test_mn_blocking_cannot_double_buffer_its_rhs_block_on_trn1():
    # rhs_tiles is [2, 64, 128, 512] bf16: 128 KiB per partition; two buffers of it exceed trn1's
    # SBUF, so the allocator keeps one and the bracket closes
    trn1 = get_target("trn1")
    program, _ = kernels.variant_program("M/N blocking", trn1, True)
    assert program.info.sbuf_peak_bytes <= trn1.sbuf_usable_bytes
    two, one = (kernels.tutorial_variant_ns("M/N blocking", trn1, prefetch) for prefetch in (True, False))
    assert two == pytest.approx(one, rel=0.05)
