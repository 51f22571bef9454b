"""Known misses of the OpInfo sweep (tests/device/opinfo_sweep.py): (op, mode) -> reason."""

EXPECTED_FAILURES: dict[tuple[str, str], str] = {
}
