"""``%%neuron_profile``: run a cell on a simulated device and show where the time went."""
from __future__ import annotations

import argparse
import contextlib

import pandas as pd
from IPython.core import magic_arguments
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from extensions.common import parse, show_profile, split_list, usage_error
from extensions.device_magics import TARGETS_HELP
from extensions.namespace import compiled, names_on, names_used, placed
from workbench.arguments import positive_float
from workbench.comparison import Comparison, compare, split_device
from workbench.devices import DEVICES, active_device, available, use_device
from workbench.session import SIMULATED_DEVICES, profile

__all__ = ["ProfileMagics"]


@magics_class
class ProfileMagics(Magics):
    """``%%neuron_profile`` and its line form ``%neuron_profile statement``."""

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("-d", "--device", choices=SIMULATED_DEVICES,
                              help="simulated device to run on (default: the active one, else neuron)")
    @magic_arguments.argument("-t", "--target", help=f"hardware to simulate ({TARGETS_HELP}); with --compare "
                              "a comma-separated list, each applied to its device")
    @magic_arguments.argument("-c", "--compile", action="store_true",
                              help="run the cell's nn.Modules through torch.compile(backend='neuron')")
    @magic_arguments.argument("--compile-modules", metavar="NAMES",
                              help="compile only these modules (comma-separated names); implies --compile")
    @magic_arguments.argument("--compare", metavar="DEVICES",
                              help=f"run the cell once per device ({','.join(DEVICES)}; device:target pins a "
                              "target, e.g. cpu,cuda:h100,neuron:trn2,tpu:v6e) and show them side by side")
    @magic_arguments.argument("--tokens", type=positive_float, metavar="N",
                              help="tokens (or samples) one run of the cell processes: --compare then prices "
                              "them (USD per 1M, per USD) instead of per step")
    @magic_arguments.argument("--timing-only", action="store_true",
                              help="tensors the cell makes hold shapes but no values (default: as the active device)")
    @magic_arguments.argument("--band", action="store_true",
                              help="add the simulated time's error band: the run replayed with each modelling "
                              "assumption at its range ends (about two replays per assumption)")
    @magic_arguments.argument("-o", dest="output", action="store_true",
                              help="return the Profile (the Comparison with --compare), like %%timeit -o")
    @magic_arguments.argument("-q", dest="quiet", action="store_true", help="display nothing")
    @magic_arguments.argument("statement", nargs=argparse.REMAINDER,
                              help="line form: the one statement to profile")
    @no_var_expand
    @line_cell_magic
    def neuron_profile(self, line: str = "", cell: str | None = None):
        """Run a cell (or, in the line form, one statement) on a simulated device; show the dashboard.

        The cell runs in the notebook's namespace on ``--device`` (default: the active device when
        it is simulated, else ``neuron``) and ``--target``. Modules and tensors the cell names that
        live on the previously active device follow it to the profiled device for the run and are
        put back afterwards, as is the active device, also when the cell raises (the error shows as
        a normal traceback). The dashboard appears in JupyterLab; elsewhere the Profile's summary.

        ``--compile``: every ``nn.Module`` the cell names (or only ``--compile-modules a,b``) is
        seen by the cell as ``torch.compile(module, backend="neuron")`` for this run; the names
        are rebound to the plain modules afterwards. Dynamo caches per module, so a re-run reuses
        the compiled graphs: only the first run's profile lists them (``%neuron_graphs`` lists
        all). Modules the cell reaches other than by name (in a list, as an attribute) run eager.

        ``--compare cpu,cuda,neuron`` runs the cell once per device and shows a table and chart
        (cpu: measured host wall time; the others: simulated time), with what a step costs on the
        instance holding each target (``--tokens N``: per 1M tokens and tokens per USD too).
        ``device:target`` pins a target (``--compare cpu,cuda:h100,neuron:trn2,tpu:v6e``); a TPU
        runs the cell on ``neuron`` timed by the TPU cost model (compiled path). ``--timing-only`` runs
        the cell in timing-only mode (tensors without values; on by default when the active device
        is in that mode, which a switch for the run keeps). ``-o`` returns the Profile
        (or the Comparison); ``-q`` displays nothing. ``--band`` adds the error band to the
        simulated time ("7.1 ms (6.2-8.3 ms)") and names the assumption that sets most of it
        (``Profile.time_band()``: about two replays of the run per assumption).
        """
        args = parse(self.neuron_profile, line)
        statement = " ".join(args.statement).strip()
        if cell is not None and statement:
            raise usage_error(self.neuron_profile, f"the cell form takes options only, not {statement!r}")
        source = cell if cell is not None else statement
        if not source.strip():
            raise usage_error(self.neuron_profile, "nothing to profile: give a statement or a cell")
        if args.compare and args.device:
            raise usage_error(self.neuron_profile, "use --compare or --device, not both")
        if args.compare and args.band:
            raise usage_error(self.neuron_profile, "--band times one device: use it without --compare")
        if args.timing_only and "cpu" in split_list(self.neuron_profile, args.compare):
            raise usage_error(self.neuron_profile, "--timing-only needs simulated devices: cpu computes values")
        args.timing_only = args.timing_only or active_device().timing_only
        to_compile = split_list(self.neuron_profile, args.compile_modules) or (
            sorted(names_used(source)) if args.compile else [])
        run = self._runner(source)
        used = names_used(source)
        if args.compare:
            result = self._compare(args, run, used, to_compile)
        else:
            result = self._profile(args, run, used, to_compile)
            if args.band:
                result.time_band()
        if args.quiet:
            pass
        elif isinstance(result, Comparison):
            result.show()
        else:
            show_profile(self.shell, result)
        return result if args.output else None

    # -- helpers ---------------------------------------------------------------------------------
    def _runner(self, source: str):
        """A callable that executes ``source`` in the notebook's namespace (tracebacks show it)."""
        filename = self.shell.compile.cache(source)
        code = self.shell.compile(source, filename, "exec")
        namespace = self.shell.user_ns
        return lambda *_device: exec(code, namespace)

    def _following(self, used) -> list[str]:
        """Modules/tensors the cell names that sit on the active device (they follow a switch)."""
        return names_on(self.shell.user_ns, used, active_device().torch_device.type)

    def _scope(self, stack: contextlib.ExitStack, device: str, target, following, to_compile,
               timing_only: bool = False) -> None:
        """Switch to ``device`` (if it is not the active one), bring ``following`` along, compile."""
        state = active_device()
        running_on = "neuron" if state.redirect else state.device      # redirected CUDA runs on neuron
        if device != running_on or (target is not None and target != state.target):
            try:
                stack.enter_context(use_device(device, target, timing_only=timing_only and device != "cpu"))
            except ValueError as exc:
                raise usage_error(self.neuron_profile, str(exc)) from None
            stack.enter_context(placed(self.shell.user_ns, following, active_device().torch_device))
        if to_compile:
            stack.enter_context(compiled(self.shell.user_ns, to_compile))

    def _profile(self, args, run, used, to_compile):
        state = active_device()
        device = args.device or ("neuron" if state.device == "cpu" or state.redirect else state.device)
        following = self._following(used)
        with contextlib.ExitStack() as stack:
            self._scope(stack, device, args.target, following, to_compile, args.timing_only)
            now = active_device()
            target = args.target or (now.target if now.device == device else None)
            return profile(run, device=device, target=target, timing_only=args.timing_only)

    def _compare(self, args, run, used, to_compile) -> Comparison:
        known = available()
        named = split_list(self.neuron_profile, args.compare, [*DEVICES, *(f"{d}:{t}" for d in known for t in known[d])],
                           "device")
        devices = [split_device(n)[0] for n in named]
        targets = split_list(self.neuron_profile, args.target, [t for d in devices for t in known[d]], "target") or None
        following = self._following(used)
        parts = []
        for device, name in zip(devices, named):
            with contextlib.ExitStack() as stack:
                timing_only = args.timing_only and device != "cpu"
                self._scope(stack, device, split_device(name)[1], following, to_compile, timing_only)
                parts.append(compare(run, devices=[name], targets=targets, tokens_per_step=args.tokens,
                                     timing_only=timing_only))
        return Comparison(pd.concat([p.frame for p in parts], ignore_index=True),
                          {k: v for p in parts for k, v in p.profiles.items()},
                          {k: v for p in parts for k, v in p.results.items()})
