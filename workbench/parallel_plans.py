"""Tensor x pipeline x data parallel plans: what one rank holds and how long a step takes.

A model is measured once (``workbench.fit.measure_model``), timing-only, on one NeuronCore (its parameters, the activations one
micro-batch saves for backward, the forward and backward time of one micro-batch, the hidden
state crossing between its repeated blocks); a :class:`ParallelPlan` then splits that work:

- memory per rank: weights, gradients and AdamW's two fp32 states per parameter split by TP x PP
  (and by DP too under FSDP, plus one block's gathered weights); activations split by TP x PP,
  times the micro-batches a stage holds at once -- all of them under GPipe, at most ``pp``
  under 1F1B (the first stage's count);
- time: each stage runs 1/(TP x PP) of the model's compute per micro-batch (equal stages, an
  ideal TP split), plus TP's two all-reduces of the hidden state per block in forward and two
  in backward (Megatron's), on the critical path; the schedule's stages are joined through their
  sends and receives (``backend.sim.pipeline``; a stage sends its 1/TP share of the hidden state,
  pipeline neighbours ``tp`` ranks apart); then the DP gradient sync -- an all-reduce (DDP), or
  FSDP's all-gather before forward and backward and reduce-scatter after, once per step -- not
  overlapped with compute, so the step time is an upper bound on that part.

Ranks are laid out TP fastest, then PP, then DP (as NeuronX Distributed and Megatron do), so TP
groups stay on a node and DP peers sit ``tp x pp`` ranks apart.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from backend.distributed.pipeline_orders import transfer_costs
from backend.sim.checks import positive_int
from backend.sim.collectives import collective_cost
from backend.sim.pipeline import gpipe_order, one_f_one_b_order, simulate_pipeline
from backend.sim.topology import Topology

__all__ = ["ParallelPlan", "ModelCosts", "evaluate_plan", "SCHEDULES", "ADAMW_STATE_BYTES"]

SCHEDULES = {"gpipe": gpipe_order, "1f1b": one_f_one_b_order}
ADAMW_STATE_BYTES = 8           # exp_avg and exp_avg_sq, fp32, per parameter


@dataclass(frozen=True)
class ParallelPlan:
    """``tp`` x ``pp`` x ``dp`` ranks; ``fsdp`` shards the states over DP as well;
    ``microbatches`` per step and rank; ``schedule`` "gpipe" or "1f1b"."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    fsdp: bool = False
    microbatches: int = 1
    schedule: str = "1f1b"

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "microbatches"):
            positive_int(f"{name} of a parallel plan", getattr(self, name))
        if not isinstance(self.fsdp, bool):
            raise ValueError(f"Invalid fsdp of a parallel plan: expected True or False, got {self.fsdp!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown pipeline schedule {self.schedule!r}; known: {', '.join(SCHEDULES)}")

    @property
    def ranks(self) -> int:
        return self.tp * self.pp * self.dp

    def in_flight(self) -> int:
        """Micro-batches whose activations the busiest stage holds at once."""
        if self.schedule == "gpipe":
            return self.microbatches
        return min(self.microbatches, self.pp)

    def __str__(self) -> str:
        return (f"tp={self.tp} pp={self.pp} dp={self.dp}{' fsdp' if self.fsdp else ''} "
                f"m={self.microbatches} {self.schedule}")


@dataclass(frozen=True)
class ModelCosts:
    """One micro-batch of a model on one NeuronCore (``workbench.fit.measure_model``)."""

    target: str
    parameters: int
    parameter_bytes: int
    activation_bytes: int       # saved by forward for backward, the whole model
    forward_ns: float
    backward_ns: float
    boundary_bytes: int         # the hidden state between two blocks (what TP reduces and PP sends)
    blocks: int                 # repeated blocks (a stage holds blocks / pp of them)


def _strided(topology: Topology, stride: int) -> Topology:
    """``topology`` as a group whose members sit ``stride`` ranks apart sees it: fewer of them on
    a node (at least one)."""
    if stride <= 1:
        return topology
    per_node = max(1, topology.devices_per_node // stride)
    return topology.derive(f"{topology.name}/every{stride}", devices_per_node=per_node)


def evaluate_plan(costs: ModelCosts, plan: ParallelPlan, hbm_bytes: int, topology: Topology) -> dict:
    """One row: the plan, the bytes one rank holds (and whether they fit ``hbm_bytes``), and the
    step: time, bubble and exposed point-to-point time, TP and DP communication.
    ``topology``: one rank per NeuronCore (``backend.sim.topology.per_core``)."""
    model_split = plan.tp * plan.pp
    state_split = model_split * (plan.dp if plan.fsdp else 1)
    weights = costs.parameter_bytes / state_split
    optimizer = ADAMW_STATE_BYTES * costs.parameters / state_split
    blocks_per_stage = max(1, costs.blocks // plan.pp) if costs.blocks else 1
    gathered = costs.parameter_bytes / model_split / blocks_per_stage if plan.fsdp and plan.dp > 1 else 0.0
    activations = costs.activation_bytes / model_split * plan.in_flight()
    held = 2 * weights + optimizer + gathered + activations

    tp_ns = 0.0
    if plan.tp > 1:
        tp_ns = 2 * blocks_per_stage * collective_cost("all_reduce", costs.boundary_bytes, plan.tp, topology).time_ns
    compute = {}
    for stage in range(plan.pp):
        compute[(stage, "F")] = costs.forward_ns / model_split + tp_ns
        compute[(stage, "B")] = costs.backward_ns / model_split + tp_ns
    order = SCHEDULES[plan.schedule](plan.pp, plan.microbatches)
    sent = {b: costs.boundary_bytes // plan.tp for b in range(plan.pp - 1)}
    timeline = simulate_pipeline(order, compute, transfer_costs(sent, order, plan.tp, topology))

    dp_ns = 0.0
    if plan.dp > 1:
        peers = _strided(topology, model_split)
        stage_bytes = int(costs.parameter_bytes / model_split)
        if plan.fsdp:
            dp_ns = (2 * collective_cost("all_gather", stage_bytes, plan.dp, peers).time_ns
                     + collective_cost("reduce_scatter", stage_bytes, plan.dp, peers).time_ns)
        else:
            dp_ns = collective_cost("all_reduce", stage_bytes, plan.dp, peers).time_ns
    return {**asdict(plan), "ranks": plan.ranks, "fits": held <= hbm_bytes, "hbm_bytes_per_rank": int(held),
            "weights_bytes": int(weights), "gradients_bytes": int(weights), "optimizer_bytes": int(optimizer),
            "gathered_bytes": int(gathered), "activation_bytes": int(activations),
            "step_time_ns": timeline.step_ns + dp_ns, "pipeline_time_ns": timeline.step_ns,
            "bubble_fraction": timeline.bubble_fraction, "p2p_exposed_ns": timeline.p2p_exposed_ns,
            "tp_communication_ns": 2 * tp_ns * plan.microbatches, "dp_communication_ns": dp_ns}
