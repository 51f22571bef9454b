"""``workbench migrate script.py``: the migration report of a model a script defines.

    workbench migrate model.py --model-var model --inputs-var x --target trn2 --baseline h100 \
        [--inference] [--batch-sizes 8,64,512] [--drift-threshold 0.02] [--no-compile] \
        [--html report.html] [--csv DIR] [-- script args]

The script runs on the CPU with ``__name__`` set to ``"__workbench_migrate__"`` (so a guarded
``if __name__ == "__main__":`` training loop does not run); it only has to define the model and
its example inputs. The findings are printed; the requested files are written.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from workbench.arguments import positive_float
from workbench.migration.numerics import DEFAULT_DRIFT_THRESHOLD
from workbench.migration.report import migration_report_for

__all__ = ["add_migrate_parser", "migrate_command", "parse_batch_sizes", "SCRIPT_RUN_NAME"]

SCRIPT_RUN_NAME = "__workbench_migrate__"


def parse_batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--batch-sizes takes integers separated by commas, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("--batch-sizes needs positive integers")
    return sizes


def add_migrate_parser(sub) -> argparse.ArgumentParser:
    from backend.sim.presets import DEFAULT_GPU_TARGET, DEFAULT_NEURON_TARGET

    p = sub.add_parser("migrate", help="report what moving a script's model from a GPU to Trainium would take")
    p.add_argument("script", type=Path, help="Python script that defines the model and its example inputs")
    p.add_argument("--model-var", default="model", help="name of the nn.Module in the script (default: model)")
    p.add_argument("--inputs-var", default="x",
                   help="name of the example inputs: a tensor, a tuple of arguments or a dict (default: x)")
    p.add_argument("--target", default=DEFAULT_NEURON_TARGET, help="NeuronCore preset, or device:preset such as tpu:v6e "
                   "(default: %(default)s)")
    p.add_argument("--baseline", default=DEFAULT_GPU_TARGET, help="GPU preset to compare with, or device:preset such as "
                   "tpu:v6e (default: %(default)s)")
    p.add_argument("--inference", action="store_true", help="forward only (default: a training step with Adam)")
    p.add_argument("--batch-sizes", type=parse_batch_sizes, metavar="B,B,...", help="batch sizes for the memory table")
    p.add_argument("--drift-threshold", type=positive_float, default=DEFAULT_DRIFT_THRESHOLD,
                   help=f"flag layers whose mean relative error exceeds this (default: {DEFAULT_DRIFT_THRESHOLD})")
    p.add_argument("--no-compile", action="store_true", help="skip the step compiled with backend='neuron'")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a standalone HTML report")
    p.add_argument("--csv", type=Path, metavar="DIR", help="write every table of the report as CSV")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    return p


def migrate_command(args, script_args: list, run_script) -> int:
    """Run the ``migrate`` subcommand; ``run_script(path, argv, run_name)`` returns the globals."""
    if not args.script.is_file():
        raise FileNotFoundError(f"no such script: {args.script}")
    namespace = run_script(args.script, script_args, run_name=SCRIPT_RUN_NAME)
    report = migration_report_for(namespace, args.model_var, args.inputs_var, target=args.target,
                                  baseline=args.baseline, training=not args.inference, batch_sizes=args.batch_sizes,
                                  drift_threshold=args.drift_threshold, compile=not args.no_compile)
    print(f"workbench migrate: {args.script} ({report.model_name}) on {report.target} vs {report.baseline}")
    for line in report.findings:
        print(f"  {line}")
    if args.html:
        print(f"wrote {report.save_html(args.html)}")
    if args.csv:
        args.csv.mkdir(parents=True, exist_ok=True)
        for name, frame in report.to_frames().items():
            frame.to_csv(args.csv / f"{name}.csv", index=False)
        print(f"wrote {args.csv}")
    return 0
