"""The Neuron workbench: run unchanged PyTorch code on a simulated NeuronCore (``neuron``) or an
emulated GPU (``cuda``) and see where the time goes.

``import workbench`` registers the ``neuron`` device; everything else is imported on use.
"""
from backend.device import register as _register_device

_register_device()

__all__ = ["__version__"]
__version__ = "0.1.0"


def load_ipython_extension(ipython):
    """``%load_ext workbench``: the magics live in ``extensions``."""
    from extensions import load_ipython_extension as _load

    _load(ipython)


def unload_ipython_extension(ipython):
    from extensions import unload_ipython_extension as _unload

    _unload(ipython)
