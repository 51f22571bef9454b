"""``fit_chips``: the smallest world a training step fits in, from timing-only fake-world runs."""
import logging

import pytest
import torch
from torch import nn

from backend.sim.presets import get_target
import workbench as wb
from workbench.fit import fit_chips

MiB = 2**20


def _model():
    return nn.Sequential(*[nn.Linear(512, 512) for _ in range(8)])      # 8 MiB of fp32 parameters


def test_fsdp_shards_state_until_it_fits_a_small_hbm(caplog):
    caplog.set_level(logging.ERROR)
    fit = fit_chips(_model, torch.randn(16, 512), target="trn2", plan="fsdp", hbm_bytes=12 * MiB, max_chips=1)
    assert fit.ranks is not None and fit.ranks > 1                      # 32 MiB of state on one core does not
    tried = fit.tried.set_index("ranks")
    assert not tried.loc[fit.ranks // 2, "fits"] and "out of memory" in tried.loc[fit.ranks // 2, "error"]
    assert tried.loc[fit.ranks, "peak_hbm_bytes"] <= 12 * MiB
    assert fit.chips == 1 and fit.cores_per_chip == get_target("trn2").cores_per_chip
    assert fit.step_time_ns > 0 and "1 chip(s)" in repr(fit)


def test_ddp_replicas_never_fit_where_fsdp_does(caplog):
    caplog.set_level(logging.ERROR)
    fit = wb.fit_chips(_model, torch.randn(16, 512), target="trn2", plan="ddp", hbm_bytes=12 * MiB, max_chips=1)
    assert fit.chips is None and not fit.tried["fits"].any() and "does not fit" in repr(fit)


def test_unknown_plan_is_rejected():
    with pytest.raises(ValueError, match="unknown plan"):
        fit_chips(_model, torch.randn(2, 512), plan="pipeline")


def test_migration_report_shows_the_chip_fit_when_asked(caplog):
    caplog.set_level(logging.ERROR)
    model = _model()
    report = wb.migration_report(model, torch.randn(16, 512), target="trn2", compile=False,
                                 fit_chips={"plan": "fsdp", "hbm_bytes": 12 * MiB, "max_chips": 1})
    assert report.chip_fit.ranks > 1 and "chips" in report.to_frames()
    from workbench.migration.view import sections
    assert "Smallest fit under fsdp: 1 chip(s)" in sections(report)["chips"]
    plain = wb.migration_report(model, torch.randn(16, 512), target="trn2", compile=False)
    assert plain.chip_fit is None and "chips" not in sections(plain)
