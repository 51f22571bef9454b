"""Loading registers the magics under both extension names; unloading removes them."""
import pytest
from IPython.core.error import UsageError

from extensions import MAGICS

LINE = {"neuron_device", "neuron_profile", "neuron_graphs"}
CELL = {"neuron_profile"}


def registered(ipython):
    magics = ipython.magics_manager.magics
    return set(magics["line"]) & LINE, set(magics["cell"]) & CELL


@pytest.mark.parametrize("name", ["workbench", "extensions"])
def test_load_and_unload(ipython, name):
    ipython.run_line_magic("load_ext", name)
    try:
        assert registered(ipython) == (LINE, CELL)
        assert all(m.__name__ in ipython.magics_manager.registry for m in MAGICS)
    finally:
        ipython.run_line_magic("unload_ext", name)
    assert registered(ipython) == (set(), set())
    assert not any(m.__name__ in ipython.magics_manager.registry for m in MAGICS)
    with pytest.raises(UsageError, match="neuron_device"):
        ipython.run_line_magic("neuron_device", "")


def test_reload_after_unload(ipython):
    ipython.run_line_magic("load_ext", "workbench")
    ipython.run_line_magic("unload_ext", "workbench")
    ipython.run_line_magic("load_ext", "workbench")
    try:
        assert registered(ipython) == (LINE, CELL)
    finally:
        ipython.run_line_magic("unload_ext", "workbench")
