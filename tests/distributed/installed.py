"""Subprocesses that see the workbench as a fresh ``pip install`` of this tree would install it:
a dist-info declaring pyproject.toml's entry points, first on ``PYTHONPATH`` (importlib.metadata
keeps the first distribution of a name), whichever copy the venv was installed from."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

__all__ = ["installed_environment", "torchrun"]


def _write_dist_info(directory: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    info = directory / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = []
    for group, entries in project["entry-points"].items():
        lines += [f"[{group}]", *(f"{name} = {target}" for name, target in entries.items()), ""]
    (info / "entry_points.txt").write_text("\n".join(lines))


def installed_environment(directory: Path, **env: str) -> dict:
    """``os.environ`` for a subprocess, with this tree installed as above, plus ``env``
    (the device variables the autoload reads or sets removed unless given)."""
    _write_dist_info(directory)
    result = {k: v for k, v in os.environ.items() if k not in ("WORKBENCH_DEVICE", "ACCELERATE_TORCH_DEVICE")}
    result["PYTHONPATH"] = os.pathsep.join([str(directory), str(ROOT), result.get("PYTHONPATH", "")])
    result.update(env)
    return result


def torchrun(script: str, env: dict, *args: str, ranks: int = 2, timeout: float = 600) -> dict:
    """Run ``tests/distributed/<script>`` under torchrun; rank 0's JSON line, parsed."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={ranks}", str(HERE / script), *args]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-6000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, out.stdout + out.stderr[-3000:]
    return {**json.loads(lines[0]), "stderr": out.stderr}
