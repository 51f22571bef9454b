"""Entry point for PyTorch's out-of-tree backend autoload (``torch.backends`` group).

Runs inside ``import torch``: it must be cheap and must never break that import.
"""
import logging


def autoload() -> None:
    try:
        from .registration import register

        register()
    except Exception as exc:  # never break `import torch`
        logging.getLogger(__name__).warning("neuron device not registered: %s", exc)
