"""Prices of the instances that hold the simulated accelerators, and the arithmetic of cost.

Each instance preset is a :class:`InstancePrice` built on the one preset mechanism
(``backend.sim.spec``): its on-demand price per hour carries the date and the source of the
price (a public price list or a page quoting it), or is an ``ASSUMPTION`` with a plausible range.
Prices are USD, Linux, on demand, us-east-1 / us-central regions.

Charging a part of an instance (the rule :data:`CHARGE_RULE`): a simulated device pays its share
of the instance, ``usd_per_hour x devices / devices per instance``, where a device is what the
simulator models -- one NeuronCore on Trainium (the NeuronCore simulator models one core), one
GPU, one TPU chip. Google lists TPUs per chip-hour, so those presets are one-chip "instances".

Users override prices (reserved, spot, negotiated): ``set_price("p5.48xlarge", 55.0)``, or
``price("p5.48xlarge").derive(usd_per_hour=40.0)`` for a what-if that leaves the table alone.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from backend.sim.checks import non_negative, positive, positive_int
from backend.sim.presets import get_target
from backend.sim.spec import ASSUMPTION, HardwareConfig, format_quantity, spec

__all__ = ["InstancePrice", "PRICES", "CHARGE_RULE", "price", "list_prices", "set_price", "reset_prices",
           "CostEstimate", "estimate", "cost_per_step", "cost_per_million", "items_per_dollar",
           "percent_more_per_dollar", "more_per_dollar"]

CHARGE_RULE = ("per-device share: usd_per_hour x devices used / devices per instance (a device is "
               "one NeuronCore on Trainium, one GPU, one TPU chip)")

_LIST = "on-demand list price"


@dataclass(frozen=True, slots=True)
class InstancePrice(HardwareConfig):
    """An instance (or per-chip listing), the accelerator preset it holds, and its price."""

    kind = "instance"
    name: str
    provider: str = spec("aws", unit="", source="the provider's instance catalogue", help="cloud provider")
    accelerator: str = spec("h100", unit="", source="the provider's instance catalogue",
                            help="preset name of the accelerator the instance holds")
    chips: int = spec(8, unit="chips", source="the provider's instance catalogue",
                      help="accelerator chips (GPUs, Trainium chips, TPU chips) per instance")
    usd_per_hour: float = spec(1.0, unit="USD/h", source=_LIST, help="on-demand price of the whole instance")
    price_date: str = spec("", unit="", source=_LIST, help="when the price was read (YYYY-MM)")

    def __post_init__(self) -> None:
        # A NaN, infinite, zero or negative price would turn into "nan% fewer tokens per dollar".
        positive_int(f"chips of {self.name}", self.chips)
        positive(f"usd_per_hour of {self.name}", self.usd_per_hour)

    @property
    def price_source(self) -> str:
        return self.source("usd_per_hour")

    @property
    def devices(self) -> int:
        """Simulated devices per instance: chips, times NeuronCores per chip on Trainium."""
        config = get_target(self.accelerator)
        return self.chips * (getattr(config, "cores_per_chip", 1) if config.kind == "neuron" else 1)

    @property
    def usd_per_device_hour(self) -> float:
        return self.usd_per_hour / self.devices

    def charge(self, seconds: float, devices: int = 1) -> float:
        """USD for ``devices`` simulated devices held ``seconds`` (the per-device share rule)."""
        seconds = non_negative("seconds", seconds)
        if not 1 <= positive_int("devices", devices) <= self.devices:
            raise ValueError(f"{self.name} has {self.devices} devices; cannot charge {devices}")
        return self.usd_per_device_hour * devices * seconds / 3600.0


_AWS_CUT = ("usage.ai/blogs/aws/ai-ml-cost/llm-cost-optimization-aws (2026-06): AWS cut P5 on-demand "
            "prices by up to 45% in June 2025")
_TPU_PAGE = "vengineer.hatenablog.com/entry/2024/11/13/080000 quoting cloud.google.com/tpu/pricing"

_STOCK = (
    InstancePrice.cited(
        "p4d.24xlarge", provider=("aws", "aws.amazon.com/ec2/instance-types/p4"),
        accelerator=("a100", "aws.amazon.com/ec2/instance-types/p4 (8x A100 40GB; the a100 preset is 80GB)"),
        chips=(8, "aws.amazon.com/ec2/instance-types/p4"),
        usd_per_hour=(32.77, "usage.ai/blogs/aws/ai-ml-cost/trainium-vs-gpu-instances and "
                             "factualminds.com (both $32.77/hr on demand; the June 2025 cut may lower it)"),
        price_date=("2026-06", "date of the quoting pages")),
    InstancePrice.cited(
        "p5.48xlarge", provider=("aws", "aws.amazon.com/ec2/instance-types/p5"),
        accelerator=("h100", "aws.amazon.com/ec2/instance-types/p5 (8x H100 80GB)"),
        chips=(8, "aws.amazon.com/ec2/instance-types/p5"),
        usd_per_hour=(55.04, f"{ASSUMPTION}: $98.32/hr before the cut (factualminds.com) x 0.56 after "
                             f"{_AWS_CUT}; plausible $39.33 (Capacity Block rate, "
                             "aws.amazon.com/ec2/capacityblocks/pricing) .. $98.32", (39.33, 98.32)),
        price_date=("2025-06", "date of the cut")),
    InstancePrice.cited(
        "trn1.32xlarge", provider=("aws", "aws.amazon.com/ec2/instance-types/trn1"),
        accelerator=("trn1", "aws.amazon.com/ec2/instance-types/trn1 (16 Trainium chips)"),
        chips=(16, "aws.amazon.com/ec2/instance-types/trn1"),
        usd_per_hour=(21.50, "usage.ai/blogs/aws/ai-ml-cost/trainium-vs-gpu-instances ($21.50/hr on demand)"),
        price_date=("2026-06", "date of the quoting page")),
    InstancePrice.cited(
        "trn2.48xlarge", provider=("aws", "aws.amazon.com/ec2/instance-types/trn2"),
        accelerator=("trn2", "awsdocs-neuron about-neuron/arch/neuron-hardware/trn2-arch (16 Trainium2 chips)"),
        chips=(16, "awsdocs-neuron about-neuron/arch/neuron-hardware/trn2-arch"),
        usd_per_hour=(45.0, f"{ASSUMPTION}: no stored page prints the on-demand price; plausible $30 .. $60 "
                            "(between trn1.32xlarge and the pre-cut p5.48xlarge per chip)", (30.0, 60.0)),
        price_date=("2025-06", "assumed")),
    InstancePrice.cited(
        "tpu-v5e", provider=("gcp", "cloud.google.com/tpu/pricing"),
        accelerator=("v5e", "cloud.google.com/tpu/pricing (per chip-hour)"),
        chips=(1, "cloud.google.com/tpu/pricing lists TPUs per chip-hour"),
        usd_per_hour=(1.20, f"{_TPU_PAGE} (v5e $1.2 per chip-hour)"),
        price_date=("2024-11", "date of the quoting page")),
    InstancePrice.cited(
        "tpu-v5p", provider=("gcp", "cloud.google.com/tpu/pricing"),
        accelerator=("v5p", "cloud.google.com/tpu/pricing (per chip-hour)"),
        chips=(1, "cloud.google.com/tpu/pricing lists TPUs per chip-hour"),
        usd_per_hour=(4.20, f"{ASSUMPTION}: no stored page prints it; plausible $3.50 .. $4.50 per chip-hour",
                      (3.50, 4.50)),
        price_date=("2024-11", "assumed")),
    InstancePrice.cited(
        "tpu-v6e", provider=("gcp", "cloud.google.com/tpu/pricing"),
        accelerator=("v6e", "cloud.google.com/tpu/pricing (per chip-hour)"),
        chips=(1, "cloud.google.com/tpu/pricing lists TPUs per chip-hour"),
        usd_per_hour=(2.70, f"{_TPU_PAGE} (v6e $2.7 per chip-hour)"),
        price_date=("2024-11", "date of the quoting page")),
)
PRICES: dict[str, InstancePrice] = {p.name: p for p in _STOCK}
_overrides: dict[str, InstancePrice] = {}


def list_prices() -> dict[str, InstancePrice]:
    """Every instance preset by name, user overrides applied."""
    return {**PRICES, **_overrides}


def price(name: str | InstancePrice) -> InstancePrice:
    """An instance by name ("p5.48xlarge"), or the first instance holding an accelerator ("h100",
    "trn2", "v6e"); an InstancePrice passes through. Overrides from :func:`set_price` apply."""
    if isinstance(name, InstancePrice):
        return name
    table, key = list_prices(), str(name).lower()
    found = table.get(key) or next((p for p in table.values() if p.accelerator == key), None)
    if found is None:
        raise ValueError(f"unknown instance or accelerator {name!r}; known instances: {', '.join(sorted(table))}; "
                         f"accelerators: {', '.join(sorted({p.accelerator for p in table.values()}))}")
    return found


def set_price(name: str, usd_per_hour: float, *, date: str | None = None,
              source: str = "user override") -> InstancePrice:
    """Replace an instance's price (reserved, spot, negotiated) until :func:`reset_prices`."""
    usd_per_hour = positive("usd_per_hour", usd_per_hour)
    base = price(name)
    was = format_quantity(base.usd_per_hour, "USD/h")
    updated = dataclasses.replace(
        base, usd_per_hour=float(usd_per_hour), price_date=date or base.price_date,
        sources={**base.sources, "usd_per_hour": f"{source} (stock: {was}, {base.price_source})"},
        changes=tuple(sorted({**dict(base.changes), "usd_per_hour": float(usd_per_hour)}.items())))
    _overrides[base.name] = updated
    return updated


def reset_prices(name: str | None = None) -> None:
    """Drop the user override of ``name`` (every override when None)."""
    if name is None:
        _overrides.clear()
    else:
        _overrides.pop(price(name).name, None)


# -- cost arithmetic -----------------------------------------------------------------------------
def cost_per_step(step_time_s: float, instance: str | InstancePrice, devices: int = 1) -> float:
    """USD one step costs on ``devices`` simulated devices of ``instance``."""
    return price(instance).charge(positive("step_time_s", step_time_s), devices)


def cost_per_million(step_time_s: float, items_per_step: float, instance: str | InstancePrice,
                     devices: int = 1) -> float:
    """USD per one million tokens (or samples) processed at ``items_per_step``."""
    items_per_step = positive("items_per_step", items_per_step)
    return cost_per_step(step_time_s, instance, devices) / items_per_step * 1e6


def items_per_dollar(step_time_s: float, items_per_step: float, instance: str | InstancePrice,
                     devices: int = 1) -> float:
    """Tokens (or samples) one USD buys."""
    return 1e6 / cost_per_million(step_time_s, items_per_step, instance, devices)


def percent_more_per_dollar(a_items_per_dollar: float, b_items_per_dollar: float) -> float:
    """How many % more items per dollar A gives than B (negative: fewer)."""
    a, b = positive("a_items_per_dollar", a_items_per_dollar), positive("b_items_per_dollar", b_items_per_dollar)
    return (a / b - 1.0) * 100.0


def more_per_dollar(a: "CostEstimate", b: "CostEstimate", unit: str = "tokens") -> str:
    """``"70% more tokens per dollar on trn2.48xlarge than on p5.48xlarge"`` (or "fewer")."""
    pct = percent_more_per_dollar(a.items_per_usd, b.items_per_usd)
    return f"{abs(pct):.0f}% {'more' if pct >= 0 else 'fewer'} {unit} per dollar on {a.label} than on {b.label}"


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """What a step costs on one instance, in the units comparisons report."""

    instance: str
    accelerator: str
    step_time_s: float
    items_per_step: float
    devices: int
    usd_per_hour: float
    usd_per_step: float
    price_date: str
    price_source: str

    @property
    def label(self) -> str:
        return f"{self.accelerator} ({self.instance})"

    @property
    def usd_per_million_items(self) -> float:
        return self.usd_per_step / self.items_per_step * 1e6 if self.items_per_step else float("nan")

    @property
    def items_per_usd(self) -> float:
        return self.items_per_step / self.usd_per_step if self.usd_per_step else float("inf")

    @property
    def items_per_s(self) -> float:
        return self.items_per_step / self.step_time_s if self.step_time_s else float("inf")

    def to_record(self) -> dict:
        record = dataclasses.asdict(self)
        record.update(usd_per_million_items=self.usd_per_million_items, items_per_usd=self.items_per_usd,
                      items_per_s=self.items_per_s)
        return record


def estimate(step_time_s: float, items_per_step: float, instance: str | InstancePrice,
             devices: int = 1) -> CostEstimate:
    """Cost of one step of ``items_per_step`` tokens/samples taking ``step_time_s`` on ``instance``."""
    step_time_s, items_per_step = positive("step_time_s", step_time_s), positive("items_per_step", items_per_step)
    inst = price(instance)
    return CostEstimate(inst.name, inst.accelerator, step_time_s, items_per_step, devices, inst.usd_per_hour,
                        inst.charge(step_time_s, devices), inst.price_date, inst.price_source)
