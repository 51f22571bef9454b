"""The workbench's machinery, in layers; each imports only the ones below it (checked by
tests/test_import_layering.py):

- ``sim``: the simulator (presets, instruction IR, costs, scheduler, trace). No torch.
- ``lowering``: aten op or fused kernel -> simulator program. No torch.
- ``recording``: the op stream, records of what ran on a simulated device and the sinks that
  consume them, plus the simulated device types and selected target both layers above read.
- ``device`` and ``compile``, peers that never import each other: the PyTorch ``neuron`` device
  (and CUDA emulation), and the ``torch.compile`` backend ``neuron``. They meet in ``recording``;
  CUDA emulation names the compile backend only by its registered string.
- ``distributed``: the ``torch.distributed`` process-group backend ``neuron``, above the device.

Modules form no import cycles inside a package either. Each layer keeps its process-wide state
in one object with ``reset()`` for tests (``recording.STREAM``, ``device.state.STATE``,
``compile.state.STATE``).

Importing ``backend`` registers nothing; ``import workbench`` registers the ``neuron`` device,
and the compile backend loads on its first ``torch.compile``. ``autoload``, torch's backend
autoload entry point (above every layer), registers the ``"neuron"`` process-group backend at
``import torch``, and the device only when ``$WORKBENCH_DEVICE=neuron`` (docs/stack.md).
"""
