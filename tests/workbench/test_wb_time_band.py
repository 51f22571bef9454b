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
    with pytest.raises(RuntimeError, match="kept no workload"):
        prof.time_band()


@pytest.mark.parametrize("device, target, knob", [("cuda", "h100", "preset:max_hbm_efficiency"),
                                                  ("tpu", "v6e", "preset:max_mxu_efficiency")])
def test_gpu_and_tpu_profiles_replay_over_their_own_assumptions(device, target, knob):
    with profile(device=device, target=target) as prof:
        a = torch.ones(512, 1024, device="neuron")
        (a @ a.t()).relu().sum()
    band = prof.time_band()
    assert band.nominal_ns == pytest.approx(prof.summary["total_time_ns"], rel=1e-9)
    assert prof.summary["total_time_low"] < prof.summary["total_time"] < prof.summary["total_time_high"]
    names = {e.knob.name for e in band.effects}
    assert knob in names and all(n.startswith("preset:") for n in names)   # no NeuronCore registry knobs
