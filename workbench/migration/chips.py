"""The migration report's "chips" section: the smallest world the training step fits in under a
parallelism plan, and the step time there (``workbench.fit.fit_chips``), run when asked."""
from __future__ import annotations

import copy
import html

from workbench.format import fmt_bytes, fmt_time_s

__all__ = ["fit_for_report", "chips_sections"]


def fit_for_report(model, args, kwargs, target, fit_chips):
    """``fit_chips`` of the report's model: a plan name ("fsdp", "ddp") or a dict of
    ``workbench.fit.fit_chips`` keywords (plan, hbm_bytes, max_chips, loss_fn)."""
    from workbench.fit import fit_chips as run

    options = {"plan": fit_chips} if isinstance(fit_chips, str) else dict(fit_chips)
    inputs = kwargs if kwargs else tuple(args)
    return run(lambda: copy.deepcopy(model), inputs, target=target, **options)


def chips_sections(report) -> dict:
    """{"chips": HTML} when the report was asked for a chip fit, else nothing."""
    fit = getattr(report, "chip_fit", None)
    if fit is None:
        return {}
    if fit.chips is None:
        answer = f"Does not fit in {int(fit.tried['ranks'].max())} ranks under {fit.plan}."
    else:
        answer = (f"Smallest fit under {fit.plan}: {fit.chips} chip(s) ({fit.ranks} NeuronCore rank(s) of "
                  f"{fmt_bytes(fit.hbm_bytes)} HBM), step {fmt_time_s(fit.step_time_ns * 1e-9)} on rank 0.")
    table = fit.tried.to_html(classes="wb", index=False, border=0, na_rep="-")
    return {"chips": f"<p>{html.escape(answer)}</p>{table}"}
