"""``%neuron_serve``: a request load on a notebook's model, on one or more targets (``wb.serve``)."""
from __future__ import annotations

import pandas as pd
from IPython.core import magic_arguments
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.display import display

from backend.sim.presets import get_target
from extensions.common import parse, split_list, usage_error

__all__ = ["ServeMagics"]

SHOWN = ("target", "tp", "replicas", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "itl_p99_s",
         "throughput_tokens_per_s", "goodput_requests_per_s", "usd_per_1m_tokens", "preemptions")
SPEECH = ("audio_seconds_per_s", "usd_per_audio_hour")
BANDED = ("ttft_p90_s", "tpot_p50_s", "usd_per_1m_tokens", "usd_per_audio_hour")


def _columns(summary: dict) -> list[str]:
    """The columns shown: speech metrics for an encoder-decoder, band ends when computed."""
    keys = list(SHOWN) + (list(SPEECH) if summary.get("model_kind") == "encoder-decoder" else [])
    return [k for key in keys for k in (key, f"{key}_low", f"{key}_high")
            if k == key or (key in BANDED and k in summary)]


def _slo(magic, text: str | None) -> dict | None:
    """``ttft=1,tpot=0.05`` -> ``{"ttft_s": 1.0, "tpot_s": 0.05}``."""
    if not text:
        return None
    slo = {}
    for item in split_list(magic, text, what="SLO bound"):
        key, _, value = item.partition("=")
        if key not in ("ttft", "tpot", "e2e") or not value:
            raise usage_error(magic, f"--slo takes ttft=S,tpot=S,e2e=S (seconds), got {item!r}")
        try:
            slo[f"{key}_s"] = float(value)
        except ValueError:
            raise usage_error(magic, f"--slo {key} must be a number of seconds, got {value!r}") from None
    return slo


@magics_class
class ServeMagics(Magics):
    """``%neuron_serve model [requests] [-t T,T] [--tp N] [--replicas N] [--scheduler S] [--slo ...]
    [--rate R --count N --prompt P --output O | --audio S] [--band] [--eager] [-o] [-q]``."""

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("model", help="name of a Hugging Face causal LM or Whisper-style encoder-decoder, "
                              "or its config, in the notebook")
    @magic_arguments.argument("requests", nargs="?", help="name of a request list or trace DataFrame "
                              "(arrival_s, prompt_tokens, output_tokens); or give --rate")
    @magic_arguments.argument("-t", "--targets", default="trn2",
                              help="comma-separated targets: trn1, trn2, trn2/lnc2, trn3, a100, h100, h200, v5e, "
                              "v5p, v6e (default: trn2)")
    @magic_arguments.argument("--tp", type=int, default=1, help="tensor-parallel devices per replica")
    @magic_arguments.argument("--replicas", type=int, default=1, help="replicas behind a round-robin balancer")
    @magic_arguments.argument("--scheduler", default="vllm", choices=("vllm", "sarathi"),
                              help="continuous batching (vllm) or chunked prefill (sarathi)")
    @magic_arguments.argument("--slo", help="goodput bounds, e.g. ttft=1,tpot=0.05 (seconds)")
    @magic_arguments.argument("--rate", type=float, help="Poisson arrivals per second (instead of requests)")
    @magic_arguments.argument("--count", type=int, default=200, help="requests at --rate (default: 200)")
    @magic_arguments.argument("--prompt", type=int, default=512, help="prompt tokens at --rate (default: 512)")
    @magic_arguments.argument("--output", type=int, default=128, help="output tokens at --rate (default: 128)")
    @magic_arguments.argument("--audio", type=float, help="speech: seconds of audio per request at --rate "
                              "(transcript tokens follow from it; --prompt and --output are then unused)")
    @magic_arguments.argument("--band", action="store_true", help="error bands on latencies and prices "
                              "(a minute per iteration kind on trn targets)")
    @magic_arguments.argument("--eager", action="store_true",
                              help="time iterations as the eager op stream (default: compiled graphs, as "
                                   "serving engines run them)")
    @magic_arguments.argument("-o", dest="return_result", action="store_true",
                              help="return the ServingResult (a dict target -> result for several targets)")
    @magic_arguments.argument("-q", dest="quiet", action="store_true", help="display nothing")
    @line_magic
    def neuron_serve(self, line: str = ""):
        """Serve a request load with a notebook's model on each target and show the summary side by
        side, with the latency CDFs. Bad names or options are a UsageError."""
        import workbench as wb
        args = parse(self.neuron_serve, line)
        namespace = self.shell.user_ns
        for name in filter(None, (args.model, args.requests)):
            if name not in namespace:
                raise usage_error(self.neuron_serve, f"name {name!r} is not defined in the notebook")
        if (args.requests is None) == (args.rate is None):
            raise usage_error(self.neuron_serve, "give either a requests name or --rate")
        targets = split_list(self.neuron_serve, args.targets, what="target")
        for target in targets:
            try:
                get_target(target)
            except ValueError as exc:
                raise usage_error(self.neuron_serve, str(exc)) from None
        if args.requests:
            requests = namespace[args.requests]
        elif args.audio is not None:
            requests = wb.serving.speech_requests(args.rate, args.count, audio_s=args.audio)
        else:
            requests = {"rate_per_s": args.rate, "count": args.count, "prompt_tokens": args.prompt,
                        "output_tokens": args.output}
        results = {t: wb.serve(namespace[args.model], requests, target=t, tp=args.tp, replicas=args.replicas,
                               scheduler=args.scheduler, slo=_slo(self.neuron_serve, args.slo), band=args.band,
                               compiled=not args.eager)
                   for t in targets}
        if not args.quiet:
            display(pd.DataFrame([{k: r.summary[k] for k in _columns(r.summary)} for r in results.values()]))
            display(wb.figures.latency_cdf_figure({r.label: r for r in results.values()}))
        if args.return_result:
            return results[targets[0]] if len(targets) == 1 else results
        return None
