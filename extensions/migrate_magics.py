"""``%neuron_migrate``: what moving a notebook's model from a GPU to Trainium would take."""
from __future__ import annotations

import torch
from IPython.core import magic_arguments
from IPython.core.magic import Magics, line_magic, magics_class

from backend.sim import hardware_kinds as kinds
from backend.sim.presets import DEFAULT_GPU_TARGET, DEFAULT_NEURON_TARGET
from extensions.common import parse, show_profile, usage_error
from workbench.arguments import positive_float
from workbench.devices import available
from workbench.migration import DEFAULT_DRIFT_THRESHOLD, migration_report_for
from workbench.migration.cli import parse_batch_sizes
from workbench.migration.run import batch_size, call_args

__all__ = ["MigrateMagics"]

_KNOWN = available()
# bare names of the role's own device, or device:preset for any simulated device (tpu:v6e)
_QUALIFIED = [f"{d}:{t}" for d in kinds.devices() for t in _KNOWN[d]]


@magics_class
class MigrateMagics(Magics):
    """``%neuron_migrate model x [-t T] [-b GPU] [--inference] [--batch-sizes B,B] [--threshold F]
    [--no-compile] [--band] [-o] [-q]``."""

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("model", help="name of the nn.Module in the notebook")
    @magic_arguments.argument("inputs", help="name of its example inputs: a tensor, a tuple of arguments or a "
                              "dict of keyword arguments (dim 0 of the first tensor is the batch)")
    @magic_arguments.argument("-t", "--target", default=DEFAULT_NEURON_TARGET, choices=[*_KNOWN["neuron"], *_QUALIFIED],
                              metavar="TARGET", help=f"NeuronCore to move to ({', '.join(_KNOWN['neuron'])}), or "
                              "device:preset such as tpu:v6e (default: %(default)s)")
    @magic_arguments.argument("-b", "--baseline", default=DEFAULT_GPU_TARGET, choices=[*_KNOWN["cuda"], *_QUALIFIED],
                              metavar="BASELINE", help=f"GPU to compare with ({', '.join(_KNOWN['cuda'])}), or "
                              "device:preset such as tpu:v6e (default: %(default)s)")
    @magic_arguments.argument("--inference", action="store_true",
                              help="forward only (default: a training step: forward, backward, Adam)")
    @magic_arguments.argument("--batch-sizes", type=parse_batch_sizes, metavar="B,B,...",
                              help="batch sizes the memory table estimates (default: powers of two)")
    @magic_arguments.argument("--threshold", type=positive_float, default=DEFAULT_DRIFT_THRESHOLD,
                              help="flag layers whose mean relative error under hardware numerics exceeds "
                              f"this (default: {DEFAULT_DRIFT_THRESHOLD:g})")
    @magic_arguments.argument("--no-compile", action="store_true",
                              help="skip the step compiled with backend='neuron' (graph breaks are still found)")
    @magic_arguments.argument("--band", action="store_true",
                              help="price the target's timing error band too (about two replays of its step "
                              "per modelling assumption)")
    @magic_arguments.argument("-o", dest="output", action="store_true", help="return the MigrationReport")
    @magic_arguments.argument("-q", dest="quiet", action="store_true", help="display nothing")
    @line_magic
    def neuron_migrate(self, line: str = ""):
        """Report what moving a model of this notebook from a GPU to Trainium would take.

        ``%neuron_migrate model x`` runs ``workbench.migration_report`` on the module named
        ``model`` and the example inputs named ``x`` (on replicas: the notebook's objects and the
        active device are left as they were) and shows the report: op coverage and host
        fallbacks, per-layer drift under hardware numerics, compile readiness, step time and MFU
        on ``--target`` against ``--baseline``, and the largest batch that fits in HBM. The
        report widget appears in JupyterLab; elsewhere its HTML. ``-o`` returns the report;
        ``-q`` displays nothing. A bad name, target or option is a UsageError; an error raised
        by the model itself shows as a normal traceback.
        """
        args = parse(self.neuron_migrate, line)
        self._check_names(args.model, args.inputs)
        report = migration_report_for(self.shell.user_ns, args.model, args.inputs, target=args.target,
                                      baseline=args.baseline, training=not args.inference,
                                      batch_sizes=args.batch_sizes, drift_threshold=args.threshold,
                                      compile=not args.no_compile, band=args.band)
        if not args.quiet:
            show_profile(self.shell, report)        # the widget in a kernel, else the report's HTML
        return report if args.output else None

    def _check_names(self, model: str, inputs: str) -> None:
        """Refuse before anything runs: ``model`` must be an nn.Module, ``inputs`` hold a batch."""
        namespace = self.shell.user_ns
        missing = [name for name in (model, inputs) if name not in namespace]
        if missing:
            modules = sorted(k for k, v in namespace.items() if isinstance(v, torch.nn.Module) and k[0] != "_")
            raise usage_error(self.neuron_migrate, f"not defined in this notebook: {', '.join(missing)}"
                              f" (nn.Modules defined: {', '.join(modules) or 'none'})")
        if not isinstance(namespace[model], torch.nn.Module):
            raise usage_error(self.neuron_migrate,
                              f"{model!r} is a {type(namespace[model]).__name__}, not an nn.Module")
        try:
            batch_size(*call_args(namespace[inputs]))
        except ValueError as exc:
            raise usage_error(self.neuron_migrate, f"{inputs!r}: {exc}") from None
