"""An IPython shell with the workbench extension loaded; exceptions from magics propagate.

``shell.run_line_magic`` / ``run_cell_magic`` raise what the magic raises; ``shell.run_cell``
shows errors the way a notebook does and reports them in ``result.error_in_exec``.
"""
from __future__ import annotations

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from workbench.devices import set_device

__all__ = []


@pytest.fixture(scope="session")
def ipython():
    import plotly.io

    plotly.io.renderers.default = "plotly_mimetype"      # never "browser" in a test run
    config = Config()
    config.HistoryManager.enabled = False
    return InteractiveShell.instance(config=config)


@pytest.fixture
def shell(ipython):
    """The shell with the extension loaded, a fresh namespace, on cpu; unloaded afterwards."""
    ipython.reset(new_session=False)
    ipython.run_line_magic("load_ext", "workbench")
    yield ipython
    ipython.run_line_magic("unload_ext", "workbench")
    set_device("cpu")


@pytest.fixture
def small(shell):
    """A small MLP and its input, made on cpu in the notebook's namespace."""
    torch.manual_seed(0)
    shell.user_ns["model"] = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    shell.user_ns["x"] = torch.randn(8, 32)
    return shell
