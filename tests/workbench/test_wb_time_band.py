"""Profile.time_band: the profiled run replayed over the assumption ranges, on request."""
import pytest
import torch

import workbench  # noqa: F401  (registers the neuron device)
from backend.sim.gpu import GpuSession
from workbench import session
from workbench.profiles import Profile
from workbench.session import profile


def test_summary_gains_a_band_only_on_request():
    with profile(target="trn1") as prof:
        a = torch.ones(256, 512, device="neuron")
        (a @ a.t()).relu()
    assert "total_time_low" not in prof.summary
    band = prof.time_band()
    s = prof.summary
    assert band.nominal_ns == pytest.approx(s["total_time_ns"], rel=1e-12)
    assert s["total_time_low"] <= s["total_time"] <= s["total_time_high"]
    assert s["total_time_low"] < s["total_time_high"]
    assert band.dominant(), "some assumption moves a matmul"


def test_a_profile_without_a_workload_says_why(monkeypatch):
    with pytest.raises(RuntimeError, match="kept no workload"):
        Profile().time_band()
    monkeypatch.setattr(session, "make_sink", lambda device, target=None: GpuSession("h100"))
    with profile() as prof:
        torch.ones(4, device="neuron") + 1
    assert prof.workload is None
