"""Every public number of the pricing arithmetic refuses NaN, infinities, negatives and (where it
makes no sense) zero with a ValueError naming it: before, ``set_price("p5.48xlarge", nan)``
gave "nan% fewer tokens per dollar" and a negative step time negative dollars."""
from __future__ import annotations

import math

import pytest

from backend.sim.pricing import (InstancePrice, cost_per_million, cost_per_step, estimate, items_per_dollar,
                                 percent_more_per_dollar, price, reset_prices, set_price)

NAN, INF = math.nan, math.inf
INST = InstancePrice(name="demo", accelerator="v6e", chips=1, usd_per_hour=3.6, price_date="2026-01")

# bad values of a quantity that must be > 0, of one that may be 0, and of a count
POSITIVE = {"nan": NAN, "inf": INF, "-inf": -INF, "negative": -1.0, "zero": 0.0}
NON_NEGATIVE = {k: v for k, v in POSITIVE.items() if k != "zero"}
COUNT = {**POSITIVE, "fraction": 2.5, "text": "2"}

# public number -> (how to pass it, its bad values)
NUMBERS = {
    "InstancePrice.usd_per_hour": (lambda v: InstancePrice(name="x", accelerator="v6e", chips=1, usd_per_hour=v),
                                   POSITIVE),
    "InstancePrice.chips": (lambda v: InstancePrice(name="x", accelerator="v6e", chips=v, usd_per_hour=1.0), COUNT),
    "derive(usd_per_hour)": (lambda v: INST.derive(usd_per_hour=v), POSITIVE),
    "set_price(usd_per_hour)": (lambda v: set_price("p5.48xlarge", v), POSITIVE),
    "charge(seconds)": (lambda v: INST.charge(v), NON_NEGATIVE),
    "charge(devices)": (lambda v: INST.charge(1.0, v), COUNT),
    "cost_per_step(step_time_s)": (lambda v: cost_per_step(v, INST), POSITIVE),
    "cost_per_step(devices)": (lambda v: cost_per_step(1.0, INST, v), COUNT),
    "cost_per_million(step_time_s)": (lambda v: cost_per_million(v, 1000, INST), POSITIVE),
    "cost_per_million(items_per_step)": (lambda v: cost_per_million(1.0, v, INST), POSITIVE),
    "items_per_dollar(items_per_step)": (lambda v: items_per_dollar(1.0, v, INST), POSITIVE),
    "estimate(step_time_s)": (lambda v: estimate(v, 1000, INST), POSITIVE),
    "estimate(items_per_step)": (lambda v: estimate(1.0, v, INST), POSITIVE),
    "estimate(devices)": (lambda v: estimate(1.0, 1000, INST, v), COUNT),
    "percent_more_per_dollar(a)": (lambda v: percent_more_per_dollar(v, 100.0), POSITIVE),
    "percent_more_per_dollar(b)": (lambda v: percent_more_per_dollar(100.0, v), POSITIVE),
}
CASES = [pytest.param(call, value, id=f"{number}={label}")
         for number, (call, bad) in NUMBERS.items() for label, value in bad.items()]


@pytest.fixture(autouse=True)
def _stock_prices():
    reset_prices()
    yield
    reset_prices()


@pytest.mark.parametrize("call,value", CASES)
def test_bad_numbers_are_refused(call, value):
    with pytest.raises(ValueError, match=r"^Invalid .+?: ") as error:
        call(value)
    assert str(value) in str(error.value)          # the message shows what was passed


def test_a_refused_price_leaves_the_table_as_it_was():
    stock = price("p5.48xlarge").usd_per_hour
    with pytest.raises(ValueError, match="Invalid usd_per_hour: nan"):
        set_price("p5.48xlarge", NAN)
    assert price("p5.48xlarge").usd_per_hour == stock


def test_good_numbers_still_price():
    assert INST.charge(0.0) == 0.0                       # an empty interval costs nothing
    assert cost_per_step(0.5, INST, 1) == pytest.approx(0.0005)
    assert estimate(0.5, 1000, INST, devices=1.0).usd_per_step == pytest.approx(0.0005)   # 1.0 is a count
