"""Entry point of PyTorch's out-of-tree backend autoload (group ``torch.backends``): what
``import torch`` registers once the workbench is installed. The rule (docs/stack.md):

- the ``"neuron"`` process-group backend, always: ``init_process_group("neuron")`` and
  ``get_default_backend_for_device("neuron")`` work with ``import torch`` alone. Only names are
  registered here; the first ``"neuron"`` group loads ``backend.distributed`` and registers the
  device (the script asked for it by name).
- the ``neuron`` device, only when ``$WORKBENCH_DEVICE=neuron`` (``backend.device.autoload``):
  it then becomes ``torch.accelerator.current_accelerator()``, which device-generic scripts
  follow. Otherwise the process keeps CPU as its accelerator, as without the workbench.
  ``import workbench`` (notebooks, ``wb.set_device``) registers it too.

Runs inside ``import torch``: cheap (``torch.distributed`` is already imported by then) and
never breaks that import.
"""
import logging
import os

__all__ = ["autoload", "register_process_group_backend"]

BACKEND_NAME = "neuron"
DEVICE_ENV = "WORKBENCH_DEVICE"    # read by backend.device.autoload; importing it costs ~0.2 s

logger = logging.getLogger(__name__)


def _create_process_group(common_opts, backend_opts):
    """The ``"neuron"`` creator until ``backend.distributed`` is loaded: load it, then delegate."""
    from backend.distributed.backend import create_process_group

    return create_process_group(common_opts, backend_opts)


def register_process_group_backend() -> None:
    """Make ``"neuron"`` a ``torch.distributed`` backend without importing the workbench."""
    import torch.distributed as dist

    if dist.is_available() and BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create_process_group, extended_api=True,
                                      devices=[BACKEND_NAME])


def autoload() -> None:
    try:
        register_process_group_backend()
    except Exception as exc:  # never break `import torch`
        logger.warning("the 'neuron' process-group backend is not registered: %s", exc)
    if os.environ.get(DEVICE_ENV):
        from backend.device.autoload import autoload as autoload_device

        autoload_device()
