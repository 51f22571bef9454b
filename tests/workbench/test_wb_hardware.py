"""wb.targets / target / derive / topology / assumptions: what notebooks need, without internals."""
import pytest

import workbench as wb


def test_targets_list_every_kind_and_filter_by_kind():
    every = wb.targets()
    assert {"trn1", "trn2", "h100", "v6e"} <= set(every)
    assert set(wb.targets("neuron")) < set(every)
    assert all(t.kind == "gpu" for t in wb.targets("gpu").values())


def test_derive_names_the_change_and_leaves_the_preset_alone():
    base = wb.target("trn2")
    roomy = wb.derive("trn2", hbm_bytes_per_s=2 * base.hbm_bytes_per_s)
    assert roomy.hbm_bytes_per_s == 2 * base.hbm_bytes_per_s
    assert wb.target("trn2").hbm_bytes_per_s == base.hbm_bytes_per_s
    assert roomy.name != base.name


def test_topology_and_unknown_names():
    assert wb.topology("trn2.48xlarge").name == "trn2.48xlarge"
    with pytest.raises(ValueError, match="unknown target"):
        wb.target("trn9")


def test_assumptions_table_has_ranges_or_sources():
    table = wb.assumptions()
    assert {"value", "unit", "low", "high", "source", "why"} <= set(table.columns)
    ranged = table["low"].notna()
    assert (table.loc[ranged, "low"] <= table.loc[ranged, "value"]).all()
    assert (table.loc[ranged, "value"] <= table.loc[ranged, "high"]).all()
    name = table.index[0]
    assert wb.assumption(name).name == name
    with pytest.raises(KeyError, match="unknown assumption"):
        wb.assumption("no.such.knob")


def test_sweep_columns_are_public():
    assert "step_time_s" in wb.SWEEP_COLUMNS
