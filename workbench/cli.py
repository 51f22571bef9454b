"""``workbench profile script.py ...``: run a script on a simulated device and report
(``workbench migrate script.py ...``: see workbench/migration/cli.py).

    workbench profile train.py --device neuron --target trn2 [--compile] [--timing-only] \
        [--html report.html] [--trace trace.json] [--csv DIR] [--parquet DIR] [-- script args]

The script runs as ``__main__`` (runpy) with the device as the default device, under
``profile()``; the summary is printed and the requested files are written.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import runpy
import sys
import threading
import weakref
from pathlib import Path

from backend.device.patching import Patcher
from workbench.format import summary_rows
from workbench.migration.cli import add_migrate_parser, migrate_command
from workbench.session import DEFAULT_TARGETS, SIMULATED_DEVICES, default_device, ensure_compile_backend, profile

__all__ = ["main", "build_parser", "compile_modules"]

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("profile", help="run a script on a simulated device and report where the time went")
    p.add_argument("script", type=Path, help="Python script to run as __main__")
    p.add_argument("--device", choices=SIMULATED_DEVICES, default="neuron")
    p.add_argument("--target", help="hardware preset (default: trn2 for neuron, h100 for cuda)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile(backend='neuron') every top-level nn.Module the script calls")
    p.add_argument("--timing-only", action="store_true",
                   help="tensors hold shapes but no values: the same simulated time for models the host cannot "
                        "hold or compute (the script must not need values: .item(), printing tensors)")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a standalone HTML report")
    p.add_argument("--trace", type=Path, metavar="FILE", help="write a Chrome/Perfetto trace (.json or .json.gz)")
    p.add_argument("--full-trace", action="store_true", help="keep every instruction in --trace (large)")
    p.add_argument("--csv", type=Path, metavar="DIR", help="write ops/instructions tables as CSV")
    p.add_argument("--parquet", type=Path, metavar="DIR", help="write ops/instructions tables as Parquet")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    add_migrate_parser(sub)       # ``workbench migrate``: workbench/migration/cli.py
    return parser


@contextlib.contextmanager
def compile_modules(backend: str = "neuron"):
    """Route calls of outermost ``nn.Module``s through ``torch.compile`` while the block runs.

    Submodule calls (and anything Dynamo traces) take the original path, so each top-level
    model is compiled once and its inner modules are part of that one graph.
    """
    import torch

    ensure_compile_backend(backend)
    original = torch.nn.Module.__call__
    compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    state = threading.local()

    def call(self, *args, **kwargs):
        if torch.compiler.is_compiling() or getattr(state, "depth", 0):
            return original(self, *args, **kwargs)
        opt = compiled.get(self)
        if opt is None:
            opt = compiled[self] = torch.compile(self, backend=backend)
        state.depth = 1
        try:
            return original(opt, *args, **kwargs)
        finally:
            state.depth = 0

    patcher = Patcher()
    patcher.setattr(torch.nn.Module, "__call__", call)
    try:
        yield
    finally:
        patcher.restore()


def _progress(enabled: bool):
    """An ``on_op`` callback driving a tqdm ops counter that appears only on long runs."""
    if not enabled:
        return None, contextlib.nullcontext()
    from tqdm import tqdm
    bar = tqdm(unit=" ops", desc="profiling", delay=2.0, mininterval=0.5, file=sys.stderr, leave=False)

    def on_op(count: int) -> None:
        bar.update(count - bar.n)

    return on_op, contextlib.closing(bar)


def _run_script(script: Path, script_args: list, run_name: str = "__main__") -> dict:
    """Run like ``python script.py args``: its own argv, its folder first on sys.path. Returns
    the script's globals."""
    argv, folder = sys.argv, str(script.resolve().parent)
    sys.argv = [str(script), *script_args]
    sys.path.insert(0, folder)
    try:
        return runpy.run_path(str(script), run_name=run_name)
    finally:
        sys.argv = argv
        sys.path.remove(folder)


def _write_outputs(prof, args) -> list:
    written = []
    if args.html:
        written.append(prof.save_html(args.html))
    if args.trace:
        written.append(prof.export_chrome_trace(args.trace, full=args.full_trace))
    if args.csv:
        written.append(prof.to_csv(args.csv))
    if args.parquet:
        written.append(prof.to_parquet(args.parquet))
    return written


def _profile_command(args, script_args: list) -> int:
    if not args.script.is_file():
        raise FileNotFoundError(f"no such script: {args.script}")
    target = args.target or DEFAULT_TARGETS[args.device]
    on_op, bar = _progress(not args.no_progress)
    compiling = compile_modules() if args.compile else contextlib.nullcontext()
    stopped = None       # the script's SystemExit or a Ctrl-C: report what ran, then pass it on
    with bar, default_device(args.device, target, timing_only=args.timing_only), compiling:
        with profile(device=args.device, target=target, on_op=on_op, timing_only=args.timing_only) as prof:
            try:
                _run_script(args.script, script_args)
            except (SystemExit, KeyboardInterrupt) as exc:
                stopped = exc
    prof.meta["compiled"] = bool(args.compile)
    prof.meta["script"] = str(args.script)
    status = _exit_status(stopped)
    if isinstance(stopped, KeyboardInterrupt) or status:
        interrupted = isinstance(stopped, KeyboardInterrupt)
        prof.meta["error"] = "KeyboardInterrupt" if interrupted else f"SystemExit: {stopped.code}"
        log.warning("%s stopped (%s); reporting the ops that ran until then", args.script, prof.meta["error"])
    rows = summary_rows(prof.summary)
    width = max(len(label) for label, _ in rows)
    modes = ", ".join(m for m, on in (("compiled", args.compile), ("timing-only", args.timing_only)) if on)
    print(f"workbench profile: {args.script} on {args.device} {target}{f' ({modes})' if modes else ''}")
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    for path in _write_outputs(prof, args):
        print(f"wrote {path}")
    if isinstance(stopped, KeyboardInterrupt):
        raise stopped
    return status


def _exit_status(stopped: BaseException | None) -> int:
    """The process status ``python script.py`` would have had (SystemExit's rules)."""
    if not isinstance(stopped, SystemExit) or stopped.code is None:
        return 0
    if isinstance(stopped.code, int):
        return stopped.code
    print(stopped.code, file=sys.stderr)         # sys.exit("message"): printed, status 1
    return 1


def main(argv: list | None = None) -> int:
    """Entry point of ``workbench`` and ``python -m workbench``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)       # exits with status 2 and usage on bad args
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.command == "migrate":
        return migrate_command(args, script_args, _run_script)
    return _profile_command(args, script_args)
