"""Instance prices and the cost arithmetic: per step, per 1M tokens, partial instances, overrides."""
from __future__ import annotations

import pytest

from backend.sim import pricing
from backend.sim.pricing import (CHARGE_RULE, InstancePrice, cost_per_million, cost_per_step, estimate,
                                 items_per_dollar, list_prices, more_per_dollar, percent_more_per_dollar,
                                 price, reset_prices, set_price)
from backend.sim.spec import ASSUMPTION


@pytest.fixture(autouse=True)
def _stock_prices():
    reset_prices()
    yield
    reset_prices()


def test_every_price_has_a_date_and_a_source():
    expected = {"p4d.24xlarge", "p5.48xlarge", "trn1.32xlarge", "trn2.48xlarge", "tpu-v5e", "tpu-v5p", "tpu-v6e"}
    assert set(list_prices()) == expected
    for inst in list_prices().values():
        assert len(inst.price_date) == 7 and inst.price_date[4] == "-", inst.name
        assert inst.price_source, inst.name
        if inst.price_source.startswith(ASSUMPTION):
            assert "plausible" in inst.price_source, inst.name
    assert "per-device share" in CHARGE_RULE


def test_lookup_by_instance_or_accelerator():
    assert price("p5.48xlarge") is price("h100") is price("H100")
    assert price("trn2").name == "trn2.48xlarge" and price("v6e").name == "tpu-v6e"
    with pytest.raises(ValueError, match="unknown instance or accelerator 'mi300x'; known instances: p4d"):
        price("mi300x")


def test_devices_per_instance():
    # Trainium is charged per NeuronCore (what the simulator models): 16 chips x 8 cores
    assert price("trn2").devices == 128 and price("trn1").devices == 32
    assert price("h100").devices == 8 and price("v6e").devices == 1


def test_cost_per_step_charges_the_device_share():
    inst = InstancePrice(name="demo", accelerator="h100", chips=8, usd_per_hour=36.0, price_date="2026-01")
    # one GPU of eight for one hour: 36 / 8
    assert inst.charge(3600.0) == pytest.approx(4.5)
    assert cost_per_step(1.0, inst) == pytest.approx(36.0 / 8 / 3600)
    assert cost_per_step(1.0, inst, devices=8) == pytest.approx(36.0 / 3600)
    with pytest.raises(ValueError, match="demo has 8 devices; cannot charge 9"):
        cost_per_step(1.0, inst, devices=9)


def test_partial_trainium_instance():
    # one NeuronCore of trn2.48xlarge for one hour: $45 / 128
    assert price("trn2").charge(3600.0) == pytest.approx(45.0 / 128)


def test_per_million_tokens_and_per_dollar():
    inst = InstancePrice(name="demo", accelerator="v6e", chips=1, usd_per_hour=3.6, price_date="2026-01")
    # a 0.5 s step on one chip at $3.6/h costs $0.0005; 1,000 tokens per step
    assert cost_per_step(0.5, inst) == pytest.approx(0.0005)
    assert cost_per_million(0.5, 1000, inst) == pytest.approx(0.5)
    assert items_per_dollar(0.5, 1000, inst) == pytest.approx(2e6)
    with pytest.raises(ValueError, match="Invalid items_per_step"):
        cost_per_million(0.5, 0, inst)


def test_estimate_and_comparison_sentence():
    a = estimate(0.1, 1000, InstancePrice(name="a", accelerator="trn2", chips=1, usd_per_hour=28.8,
                                         price_date="x"))   # 8 NeuronCores: $3.6 per core-hour
    b = estimate(0.1, 1000, InstancePrice(name="b", accelerator="h100", chips=1, usd_per_hour=6.12, price_date="x"))
    assert a.usd_per_step == pytest.approx(1e-4) and a.usd_per_million_items == pytest.approx(0.1)
    assert a.items_per_usd == pytest.approx(1e7) and a.items_per_s == pytest.approx(1e4)
    assert percent_more_per_dollar(a.items_per_usd, b.items_per_usd) == pytest.approx(70.0)
    assert more_per_dollar(a, b) == "70% more tokens per dollar on trn2 (a) than on h100 (b)"
    assert more_per_dollar(b, a, unit="samples").startswith("41% fewer samples per dollar on h100 (b)")
    record = a.to_record()
    assert record["instance"] == "a" and record["usd_per_million_items"] == pytest.approx(0.1)


def test_user_override_and_reset():
    stock = price("p5.48xlarge").usd_per_hour
    set_price("p5.48xlarge", 40.0, date="2026-12", source="spot")
    inst = price("h100")
    assert inst.usd_per_hour == 40.0 and inst.price_date == "2026-12"
    assert inst.price_source.startswith("spot (stock: ") and inst.changes == (("usd_per_hour", 40.0),)
    assert cost_per_step(3600.0, "p5.48xlarge") == pytest.approx(40.0 / 8)
    assert pricing.PRICES["p5.48xlarge"].usd_per_hour == stock       # the stock table is untouched
    reset_prices("h100")
    assert price("p5.48xlarge").usd_per_hour == stock


def test_derive_is_a_what_if_that_leaves_the_table_alone():
    cheap = price("tpu-v6e").derive(usd_per_hour=1.0)
    assert cheap.name == "tpu-v6e*" and cheap.usd_per_hour == 1.0
    assert price("tpu-v6e").usd_per_hour == 2.70
    assert "what-if" in cheap.price_source
