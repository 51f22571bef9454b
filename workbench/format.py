"""Human-readable numbers for summaries: times, bytes, percentages, with their units."""
from __future__ import annotations

__all__ = ["fmt_time_s", "fmt_bytes", "fmt_count", "fmt_usd", "summary_rows", "SUMMARY_FIELDS"]

# (summary key, label, kind) in display order; kinds pick the formatter.
SUMMARY_FIELDS = (
    ("target", "target", "text"),
    ("values", "tensor values", "text"),           # only in timing-only runs: "none (timing-only)"
    ("total_time", "simulated time", "seconds"),
    ("band_dominant", "band set mostly by", "text"),  # only after Profile.time_band()
    ("host_wall_time", "host wall time (measured)", "seconds"),
    ("op_count", "ops / kernels", "count"),
    ("instruction_count", "instructions", "count"),
    ("total_flops", "FLOPs", "count"),
    ("mfu_estimated_percent", "MFU", "percent"),
    ("hfu_estimated_percent", "HFU", "percent"),
    ("mbu_estimated_percent", "MBU", "percent"),
    ("tensor_engine_active_time_percent", "TensorE active", "percent"),
    ("vector_engine_active_time_percent", "VectorE active", "percent"),
    ("scalar_engine_active_time_percent", "ScalarE active", "percent"),
    ("gpsimd_engine_active_time_percent", "GpSimdE active", "percent"),
    ("dma_active_time_percent", "DMA queues active", "percent"),
    ("hbm_read_bytes", "HBM read", "bytes"),
    ("hbm_write_bytes", "HBM write", "bytes"),
    ("sbuf_read_bytes", "SBUF read", "bytes"),
    ("psum_write_bytes", "PSUM write", "bytes"),
    ("fallback_count", "host fallbacks", "count"),
    ("host_fallback_time_ns", "host fallback time", "nanoseconds"),
    ("graph_count", "compiled graphs", "count"),
    ("graph_break_count", "graph breaks", "count"),
    ("events_dropped", "events not kept", "count"),
    # Only when a fake world's schedule.step() joined its pipeline (the last step's).
    ("pipeline_step_time", "pipeline step (all stages)", "seconds"),
    ("pipeline_bubble_fraction", "pipeline bubble", "fraction"),
    ("pipeline_p2p_exposed_time", "exposed point-to-point", "seconds"),
)

# GPU traces name their engines differently; relabel so the table does not lie.
_GPU_LABELS = {"tensor_engine_active_time_percent": "tensor cores active",
               "vector_engine_active_time_percent": "CUDA cores active",
               "dma_active_time_percent": "HBM busy"}
_NEURON_ONLY = ("scalar_engine_active_time_percent", "gpsimd_engine_active_time_percent")


def fmt_time_s(seconds: float) -> str:
    seconds = float(seconds)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def fmt_bytes(nbytes: float) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.3g} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    return f"{value:.3g} TiB"


def fmt_count(n: float) -> str:
    n = float(n)
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.0f}"


def fmt_usd(usd: float) -> str:
    """Dollars to 3 significant digits, however small a step's cost is ("$3.1e-09"); "-" for NaN."""
    usd = float(usd)
    if usd != usd:
        return "-"
    return f"${usd:,.2f}" if abs(usd) >= 100 else f"${usd:.3g}"


def _format(value, kind: str) -> str:
    if kind == "text":
        return str(value)
    if kind == "seconds":
        return fmt_time_s(value)
    if kind == "nanoseconds":
        return fmt_time_s(value * 1e-9)
    if kind == "percent":
        return f"{float(value):.1f} %"
    if kind == "fraction":
        return f"{100 * float(value):.1f} %"
    if kind == "bytes":
        return fmt_bytes(value)
    return fmt_count(value)


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    """(label, formatted value) for the fields a summary has, GPU engines relabelled."""
    gpu = summary.get("device_kind") == "cuda"
    rows = []
    for key, label, kind in SUMMARY_FIELDS:
        if key not in summary or (gpu and key in _NEURON_ONLY):
            continue
        if key == "target":
            rows.append(("device", f"{summary.get('device_kind', '')} {summary[key]}".strip()))
            continue
        value = _format(summary[key], kind)
        if key == "total_time" and "total_time_low" in summary:     # the error band: "7.1 ms (6.2-8.3 ms)"
            value += f" ({fmt_time_s(summary['total_time_low'])}-{fmt_time_s(summary['total_time_high'])})"
        rows.append((_GPU_LABELS.get(key, label) if gpu else label, value))
    return rows
