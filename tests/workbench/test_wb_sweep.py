"""wb.sweep: a what-if grid runs as Ray tasks, one DataFrame row per point, each point's numbers
equal to the same point profiled in this process."""
import pytest
import torch

pytest.importorskip("ray")

import workbench as wb                                      # noqa: E402
from workbench.sweeps import grid_points, run_point          # noqa: E402


def all_reduce_step(target, chips, parallelism, batch):
    import torch.distributed as dist
    device = "cuda" if target == "h100" else "neuron"
    grads = torch.ones(batch * 1024, device=device)
    (grads * 2).sum()
    dist.all_reduce(grads)


@pytest.fixture(scope="module")
def local_ray():
    import sys

    import ray
    # Ray workers cannot import this test module: ship its functions by value, as a notebook's are.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_grid_points_are_the_product_in_key_order():
    assert grid_points({"chips": [1, 2], "batch": [4, 8]}) == [
        {"chips": 1, "batch": 4}, {"chips": 1, "batch": 8}, {"chips": 2, "batch": 4}, {"chips": 2, "batch": 8}]
    with pytest.raises(ValueError, match="non-empty list"):
        grid_points({"chips": 4})


GRID = {"target": ["trn2", "h100"], "chips": [1, 16], "parallelism": ["ddp"], "batch": [4]}


def test_sweep_in_process_rows_per_point():
    frame = wb.sweep(all_reduce_step, GRID, parallel=False, progress=False)
    assert list(frame[["target", "chips"]].itertuples(index=False, name=None)) == [
        ("trn2", 1), ("trn2", 16), ("h100", 1), ("h100", 16)]
    assert {"step_time_s", "compute_time_s", "communication_time_s", "exposed_communication_time_s",
            "hbm_peak_bytes_per_rank"} <= set(frame.columns)
    # one chip all-reduces with nobody: the 16-chip point pays for the collective
    assert frame.iloc[1]["step_time_s"] > frame.iloc[0]["step_time_s"]
    assert frame.iloc[3]["step_time_s"] > frame.iloc[2]["step_time_s"]      # NCCL's all_reduce on dgx-h100
    assert list(frame["communication_time_s"] > 0) == [False, True, False, True]
    # a synchronous all_reduce is waited for: all of it is exposed
    assert (frame["exposed_communication_time_s"] == frame["communication_time_s"]).all()


def test_sweep_trains_a_module_one_ddp_step():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    frame = wb.sweep(model, {"chips": [1, 4], "batch": [2]}, inputs=lambda batch: torch.randn(batch, 64),
                     parallel=False, progress=False)
    assert len(frame) == 2 and (frame["step_time_s"] > 0).all()
    assert (frame["hbm_peak_bytes_per_rank"] > 0).all()
    assert frame.iloc[1]["communication_time_s"] > 0 == frame.iloc[0]["communication_time_s"]


@pytest.mark.slow          # a local Ray takes 10-40 s to start
def test_sweep_on_ray_matches_points_run_here(local_ray):
    frame = wb.sweep(all_reduce_step, GRID, progress=False)
    assert local_ray.is_initialized()                     # an initialised Ray is left as it was
    here = run_point(all_reduce_step, grid_points(GRID)[1])
    assert frame.iloc[1]["step_time_s"] == pytest.approx(here["step_time_s"])
    assert list(frame["chips"]) == [1, 16, 1, 16]


def test_missing_ray_names_the_extra(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"neuron-workbench\[sweep\]"):
        wb.sweep(all_reduce_step, {"chips": [1]})
