"""The device's half of PyTorch's out-of-tree backend autoload (``backend.autoload`` calls it;
installs made before that module existed name this one as the entry point).

``neuron`` is registered at ``import torch`` only when ``$WORKBENCH_DEVICE`` is ``neuron``:
registering it renames PrivateUse1, which makes it ``torch.accelerator.current_accelerator()``
for the whole process (PyTorch picks a renamed PrivateUse1 before anything else), so CPU-only
scripts in the same environment would otherwise find their meshes and defaults on ``neuron``.

A process that asked also tells Hugging Face: ``accelerate`` and ``transformers`` recognise a
device named ``neuron`` only when AWS's ``torch_neuronx`` is importable, and otherwise place
``Trainer``/``Accelerator`` work on CPU; both take the device from ``$ACCELERATE_TORCH_DEVICE``
when it is set (``PartialState``, ``TrainingArguments._setup_devices``), so it defaults to
``neuron`` here. A value the user set stays.
"""
import logging
import os

__all__ = ["DEVICE_ENV", "HF_DEVICE_ENV", "device_requested", "autoload"]

DEVICE_ENV = "WORKBENCH_DEVICE"
HF_DEVICE_ENV = "ACCELERATE_TORCH_DEVICE"
DEVICE_NAME = "neuron"

logger = logging.getLogger(__name__)


def device_requested() -> bool:
    """Whether this process asked for ``neuron`` before ``import torch`` (``$WORKBENCH_DEVICE``)."""
    wanted = os.environ.get(DEVICE_ENV, "").strip().lower()
    if wanted not in ("", "cpu", DEVICE_NAME):
        logger.warning("%s=%r is not a device the workbench registers at import; only %r is",
                       DEVICE_ENV, wanted, DEVICE_NAME)
    return wanted == DEVICE_NAME


def autoload() -> None:
    """Register ``neuron`` if the environment asks for it. Runs inside ``import torch``: it must
    be cheap when not asked (nothing of the device is imported) and must never break that import."""
    if not device_requested():
        return
    try:
        from .registration import register

        register()
    except Exception as exc:  # never break `import torch`
        logger.warning("neuron device not registered: %s", exc)
        return
    os.environ.setdefault(HF_DEVICE_ENV, DEVICE_NAME)
