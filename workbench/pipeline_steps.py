"""``PipelineStep``: one simulated pipeline step as tables, a summary and a Gantt chart (one
lane per stage); ``wb.pipeline_step`` returns one, and ``Profile.pipeline`` for a fake world's
``schedule.step()``."""
from __future__ import annotations

from dataclasses import dataclass

from backend.sim.pipeline import PipelineTimeline

__all__ = ["PipelineStep"]


@dataclass
class PipelineStep:
    """A simulated pipeline step: ``timeline`` holds every stage's lane and the costs it ran with
    (``wb.pipeline_step``'s answer, and ``Profile.pipeline`` for a fake world's ``schedule.step()``)."""

    timeline: PipelineTimeline

    @property
    def compute_ns(self) -> dict:
        """(stage, "F" | "B" | "I" | "W") -> simulated time of one micro-batch."""
        return self.timeline.compute_ns

    @property
    def p2p_ns(self) -> dict:
        """(stage, kind) -> the transfer into that action."""
        return self.timeline.p2p_ns

    @property
    def summary(self) -> dict:
        return {"schedule": self.timeline.schedule, "topology": self.timeline.topology, **self.timeline.summary()}

    def to_records(self) -> list[dict]:
        return self.timeline.to_records()

    def figure(self):
        """The schedule as a Gantt chart: one lane per stage, forward and backward coloured apart."""
        import plotly.graph_objects as go

        fig = go.Figure()
        colours = {"F": "#4C78A8", "B": "#F58518", "I": "#F58518", "W": "#54A24B"}
        for kind in sorted({e.kind for e in self.timeline.events}):
            events = [e for e in self.timeline.events if e.kind == kind]
            fig.add_bar(y=[f"stage {e.stage}" for e in events], x=[(e.end_ns - e.start_ns) * 1e-3 for e in events],
                        base=[e.start_ns * 1e-3 for e in events], orientation="h", name=kind,
                        marker_color=colours[kind], text=[str(e.microbatch) for e in events],
                        hovertemplate="%{y} " + kind + " micro-batch %{text}<br>%{base:.1f} us + %{x:.1f} us")
        s = self.summary
        fig.update_layout(title=f"{s['schedule']}: step {s['step_time'] * 1e3:.3f} ms, bubble "
                                f"{s['bubble_fraction']:.1%}, exposed p2p {s['p2p_exposed_time'] * 1e6:.1f} us",
                          xaxis_title="time (us)", barmode="overlay", yaxis_autorange="reversed")
        return fig
