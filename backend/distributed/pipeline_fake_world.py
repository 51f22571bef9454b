"""``torch.distributed.pipelining`` schedules on one rank of a fake world.

A schedule's first step runs a warm-up vote between the stages (an int sent down the pipeline and
back, read with ``.item()``) and, unless every stage was given its shapes, receives each
neighbour's activation metadata as a pickled object. A fake world moves no values, so the vote
read raised ``FakeWorldValueError`` and the metadata arrived as garbage (a 130,719 GiB buffer).
In a fake world the vote is decided here instead: a stage built with ``input_args`` and
``output_args`` needs nothing from its peers (STATIC inference: its receive buffers take their
shapes from that metadata), and one without them raises an error saying what to pass. The
sends and receives of the step itself are then priced as usual, carrying those shapes.
"""
from __future__ import annotations

import functools

import torch.distributed as dist
from torch.distributed.pipelining._utils import InferenceMode
from torch.distributed.pipelining.schedules import _PipelineSchedule

from .replacement import replace_once

__all__ = ["install"]


def _moves_no_values(group) -> bool:
    return bool(getattr(group or dist.group.WORLD, "moves_no_values", False)) and dist.get_world_size(group) > 1


def _decide_without_peers(stages, has_backward: bool) -> None:
    for stage in stages:
        if InferenceMode.needs_dynamic(stage._user_meta, has_backward):
            raise RuntimeError(
                f"pipeline stage {stage.stage_index} runs on one rank of a fake world, which cannot receive "
                f"its neighbours' tensor shapes: build it with PipelineStage(..., input_args=<one micro-batch's "
                f"input>, output_args=<its output>) (meta or timing-only tensors are enough), or run the ranks "
                f"for real with workbench.distributed.launch")
        stage._inference_mode = InferenceMode.STATIC


def _warmup_on_fake_worlds(warmup):
    @functools.wraps(warmup)
    def run(self, stages, has_backward, p2p_done):
        if stages and _moves_no_values(stages[0].group):
            return _decide_without_peers(stages, has_backward)
        return warmup(self, stages, has_backward, p2p_done)
    return run


def install() -> None:
    """Once per process: pipeline schedules warm up without peers on a fake world."""
    replace_once(_PipelineSchedule, "_warmup_p2p", _warmup_on_fake_worlds)
