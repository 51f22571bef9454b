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


@pytest.fixture
def local_ray():
    """A Ray the test starts itself, shut down after it: later tests start (or refuse) their own."""
    import sys

    import ray
    # Ray workers cannot import this test module: ship its functions by value, as a notebook's are.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    from workbench.ray_cluster import ray_session

    with ray_session(None, num_cpus=2, connect_timeout_s=10) as started:   # loopback only, as a sweep's own
        yield started


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


MLP = torch.nn.Sequential(torch.nn.Linear(8, 8))


def _batch(batch):
    return torch.randn(batch, 8)


@pytest.mark.parametrize("grid,message", [
    ({}, "the grid is empty"),                                   # ran one default point
    ({"chips": [2.7]}, r"Invalid chips in the sweep grid: 2.7"),  # ran 2 ranks, labelled 2.7
    ({"chips": [0]}, r"Invalid chips in the sweep grid: 0"),      # an AssertionError inside torch
    ({"chips": [-4]}, r"Invalid chips in the sweep grid: -4"),
    ({"chips": [float("nan")]}, r"Invalid chips in the sweep grid: nan"),
    ({"chips": [float("inf")]}, r"Invalid chips in the sweep grid: inf"),
    ({"batch": [0]}, r"Invalid batch in the sweep grid: 0"),
    ({"batch": [float("nan")]}, r"Invalid batch in the sweep grid: nan"),
    ({"tgt": ["h100"]}, r"unknown grid key\(s\) 'tgt' for a model; known: target, chips"),   # was ignored
    ({"target": ["h1000"]}, "h1000"),
    ({"parallelism": ["fsdp"]}, "parallelism in"),
])
def test_a_bad_grid_is_refused_before_anything_runs(grid, message):
    with pytest.raises(ValueError, match=message):
        wb.sweep(MLP, grid, inputs=_batch, parallel=False, progress=False)


@pytest.mark.parametrize("option,value", [("connect_timeout_s", float("nan")), ("connect_timeout_s", -1.0),
                                          ("connect_timeout_s", 0.0), ("num_cpus", 0), ("num_cpus", 1.5)])
def test_bad_sweep_options_are_refused(option, value):
    with pytest.raises(ValueError, match=rf"Invalid {option}: "):
        wb.sweep(all_reduce_step, {"chips": [1]}, address="127.0.0.1:1", progress=False, **{option: value})


def test_a_function_must_take_every_key_of_the_grid():
    with pytest.raises(ValueError, match="unexpected keyword argument 'tgt'"):
        wb.sweep(all_reduce_step, {"tgt": ["h100"]}, parallel=False, progress=False)
    seen = []
    wb.sweep(lambda **point: seen.append(point), {"tgt": ["x"]}, parallel=False, progress=False)
    assert seen[0]["tgt"] == "x"                   # a function taking **point gets any key


def test_a_tpu_target_sweeps_with_its_collectives_on_the_slice():
    # "v6e" used to fail with "unknown topology 'v6e'"
    frame = wb.sweep(all_reduce_step, {"target": ["v6e"], "chips": [1, 4]}, parallel=False, progress=False)
    assert list(frame["chips"]) == [1, 4]
    assert frame.iloc[0]["communication_time_s"] == 0 < frame.iloc[1]["communication_time_s"]
    assert frame.iloc[1]["step_time_s"] > frame.iloc[0]["step_time_s"]
    model = wb.sweep(MLP, {"target": ["v6e"], "chips": [4], "batch": [2]}, inputs=_batch,
                     parallel=False, progress=False)
    assert model.iloc[0]["communication_time_s"] > 0              # DDP's gradient all-reduce


def test_an_unreachable_address_fails_fast_with_what_to_check():
    import socket
    with socket.socket() as s:                    # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match=rf"cannot reach 127.0.0.1:{port} within 1 s") as error:
        wb.sweep(all_reduce_step, {"chips": [1]}, address=f"127.0.0.1:{port}", connect_timeout_s=1,
                 progress=False)
    assert "RAY_AUTH_MODE=token" in str(error.value)
    import ray
    assert not ray.is_initialized()


def test_ray_client_addresses_name_the_client_extra():
    import importlib.util
    if importlib.util.find_spec("grpc") is not None:
        pytest.skip("ray[client] is installed here")
    with pytest.raises(ImportError, match=r"ray\[client\]"):
        wb.sweep(all_reduce_step, {"chips": [1]}, address="ray://127.0.0.1:10001", progress=False)


def test_the_sweep_extra_installs_ray_client():
    import tomllib
    from pathlib import Path
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert any(dep.startswith("ray[client]") for dep in project["project"]["optional-dependencies"]["sweep"])


@pytest.mark.slow          # starts a local Ray
def test_a_local_ray_listens_on_loopback_only():
    # Ray's services listened on every interface, and its autoscaler's metrics endpoint answered
    # HTTP 200 without authentication on the host's address.
    import psutil
    from workbench.ray_cluster import ray_session

    with ray_session(None, 1, 10.0) as ray:
        ray.get(ray.remote(lambda: 1).remote())
        me = psutil.Process()
        pids = {me.pid, *(p.pid for p in me.children(recursive=True))}
        listening = {(c.laddr.ip, c.laddr.port) for c in psutil.net_connections("inet")
                     if c.pid in pids and c.status == psutil.CONN_LISTEN}
    assert listening, "a local Ray listens somewhere"
    assert all(_is_loopback(ip) for ip, _ in listening), listening


def _is_loopback(ip: str) -> bool:
    import ipaddress
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback     # ::ffff:127.0.0.1 too
