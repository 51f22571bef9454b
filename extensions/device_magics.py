"""``%neuron_device``: which device the notebook's model code runs on."""
from __future__ import annotations

import logging

from IPython.core import magic_arguments
from IPython.core.magic import Magics, line_magic, magics_class

from extensions.common import parse, show_text, split_list, usage_error
from extensions.namespace import tensors_and_modules
from workbench.devices import DEVICES, active_device, available, move, set_device
from workbench.html_parts import html_table

__all__ = ["DeviceMagics", "TARGETS_HELP"]

log = logging.getLogger(__name__)

TARGETS_HELP = "; ".join(f"{device}: {', '.join(targets)}" for device, targets in available().items() if targets)


def _status(state, moved=()) -> None:
    lines = [("active", state.status_line())]
    if moved:
        lines.append(("moved", ", ".join(moved)))
    lines += [("available", "cpu; " + TARGETS_HELP)]
    text = "\n".join(f"{key:>9}: {value}" for key, value in lines)
    show_text(text, html_table(lines, row_headers=True))


@magics_class
class DeviceMagics(Magics):
    """``%neuron_device [cpu|neuron|cuda] [--target T] [--redirect] [--timing-only] [--move a,b]``."""

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("device", nargs="?", choices=DEVICES,
                              help="run model code on this device from now on; omit to show the active one")
    @magic_arguments.argument("-t", "--target", help=f"hardware to simulate ({TARGETS_HELP}); "
                              "default trn2 for neuron, h100 for cuda, v6e for tpu")
    @magic_arguments.argument("--redirect", action="store_true",
                              help="cuda only: run CUDA-written code on the simulated NeuronCore")
    @magic_arguments.argument("--timing-only", action="store_true",
                              help="neuron or cuda: new tensors hold shapes but no values (models the host cannot hold)")
    @magic_arguments.argument("-m", "--move", metavar="NAMES",
                              help="comma-separated modules/tensors of the notebook to move to the device")
    @line_magic
    def neuron_device(self, line: str = ""):
        """Show or switch the device that unchanged model code runs on.

        ``%neuron_device`` shows the active device, its target and what is available.
        ``%neuron_device neuron --target trn1`` makes new tensors and modules land on the simulated
        NeuronCore; ``%neuron_device cuda --target h100`` turns CUDA emulation on, so code that
        says ``.cuda()`` runs on an emulated H100 (``--redirect``: on the NeuronCore instead);
        ``%neuron_device tpu --target v6e`` runs model code on the ``neuron`` device (values as on
        CPU) and times profiles with the TPU cost model, on the compiled (XLA whole-graph) path TPUs
        use. ``--timing-only`` makes tensors and modules made from now on hold shapes but no values
        (same simulated time, host memory does not grow with the model; switching again leaves it);
        ``%neuron_device cpu`` puts torch back exactly as it was. ``--move model,x`` moves those
        objects of the notebook to the device as well (objects made earlier keep their device
        otherwise). A bad device, target or name is a UsageError and changes nothing.
        """
        args = parse(self.neuron_device, line)
        names = split_list(self.neuron_device, args.move)
        if args.device is None:
            if args.target or args.redirect or args.timing_only:
                raise usage_error(self.neuron_device, "--target, --redirect and --timing-only need a device")
            if names:
                self._move(names)
            _status(active_device(), names)
            return
        self._check_movable(names)
        previous = active_device()
        try:
            state = set_device(args.device, args.target, redirect=args.redirect, timing_only=args.timing_only)
        except ValueError as exc:
            raise usage_error(self.neuron_device, str(exc)) from None
        try:
            self._move(names)
        except BaseException:
            set_device(previous.device, previous.target, redirect=previous.redirect, timing_only=previous.timing_only)
            raise
        log.info("device: %s", state.status_line())
        _status(state, names)

    def _check_movable(self, names) -> None:
        """Refuse before anything changes: every name must be a module or tensor of the notebook."""
        bad = sorted(set(names) - set(tensors_and_modules(self.shell.user_ns, names)))
        if bad:
            raise usage_error(self.neuron_device, f"not a module or tensor of this notebook: {', '.join(bad)}")

    def _move(self, names) -> None:
        self._check_movable(names)
        try:
            move(self.shell.user_ns, names)
        except ValueError as exc:
            raise usage_error(self.neuron_device, str(exc)) from None
