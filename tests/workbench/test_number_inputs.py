"""The workbench's public numbers (cost, cost tables, comparisons, the migration report, the CLI)
refuse NaN, infinities, negatives and zero before anything runs: before, ``--tokens -5`` gave
negative tokens per dollar and ``workbench migrate --drift-threshold nan`` was accepted."""
from __future__ import annotations

import math

import pytest
import torch

import workbench as wb
from workbench import cli
from workbench.pricing import cost, cost_columns, cost_table

BAD = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "negative": -5.0, "zero": 0.0}
BAD_TIMES = {k: v for k, v in BAD.items() if k != "zero"}     # a step of no time prices as NaN


@pytest.fixture(scope="module")
def prof():
    with wb.profile(device="neuron", target="trn2") as p:
        torch.ones(64, 64, device="neuron").sum()
    return p


def _never_called(*args, **kwargs):
    raise AssertionError("ran although an argument was invalid")


def _model_that_must_not_run():
    class Refuses(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("ran although an argument was invalid")
    return Refuses()


NUMBERS = {
    "cost(tokens_per_step)": (lambda p, v: cost(p, tokens_per_step=v), BAD),
    "cost(steps)": (lambda p, v: cost(p, steps=v), {**BAD, "fraction": 1.5}),
    "cost(devices)": (lambda p, v: cost(p, devices=v), {**BAD, "fraction": 1.5}),
    "cost_table(tokens_per_step)": (lambda p, v: cost_table({"a": p}, tokens_per_step=v), BAD),
    "cost_table(steps)": (lambda p, v: cost_table({"a": p}, steps=v), BAD),
    "cost_columns(step_time_s)": (lambda p, v: cost_columns(v, "trn2", 1000), BAD_TIMES),
    "cost_columns(items_per_step)": (lambda p, v: cost_columns(1.0, "trn2", v), BAD),
    "compare(tokens_per_step)": (lambda p, v: wb.compare(_never_called, devices=["neuron"], tokens_per_step=v), BAD),
    "migration_report(drift_threshold)": (
        lambda p, v: wb.migration_report(_model_that_must_not_run(), torch.ones(2, 2), drift_threshold=v), BAD),
    "migration_report(batch_sizes)": (
        lambda p, v: wb.migration_report(_model_that_must_not_run(), torch.ones(2, 2), batch_sizes=[8, v]),
        {**BAD, "fraction": 2.7}),
}
CASES = [pytest.param(call, value, id=f"{number}={label}")
         for number, (call, bad) in NUMBERS.items() for label, value in bad.items()]


@pytest.mark.parametrize("call,value", CASES)
def test_bad_numbers_are_refused(prof, call, value):
    with pytest.raises(ValueError, match=r"^Invalid .+?: ") as error:
        call(prof, value)
    assert str(value) in str(error.value)


def test_a_step_of_no_time_has_nan_costs_and_good_numbers_price(prof):
    assert math.isnan(cost_columns(0.0, "trn2", 1000)["usd_per_step"])
    assert cost(prof, tokens_per_step=1000).items_per_usd > 0
    assert cost_columns(1.0, "trn2", None)["items_unit"] == "steps"


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "-1", "0", "abc"])
def test_migrate_cli_refuses_a_bad_drift_threshold(tmp_path, capsys, bad):
    script = tmp_path / "model.py"
    script.write_text("raise AssertionError('ran although an argument was invalid')\n")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["migrate", str(script), f"--drift-threshold={bad}"])
    assert exit_.value.code == 2                           # argparse: usage and the reason
    assert f"argument --drift-threshold: expected a finite number > 0, got '{bad}'" in capsys.readouterr().err
