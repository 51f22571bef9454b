"""Pipeline parallelism with PyTorch's own ``torch.distributed.pipelining`` on ``neuron`` ranks:
a stage built by hand (``PipelineStage``) or split from a traced model (``pipeline`` +
``build_stage``), run by ``ScheduleGPipe`` and ``Schedule1F1B``, gives the losses and gradients
of the same pipeline on CPU gloo ranks."""
import pytest
import torch
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, SplitPoint, pipeline

from workbench.distributed import launch

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
LAYERS, MICROBATCHES = 4, 4


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(LAYERS))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def _batch():
    data = torch.Generator().manual_seed(1)
    return torch.randn(8, 8, generator=data), torch.randn(8, 8, generator=data)


def _hand_split_stage(rank, world, device, x):
    """The stage of ``rank`` as the PyTorch tutorial writes it: this rank's layers, by hand."""
    per = LAYERS // world
    layers = list(Net().layers)[rank * per:(rank + 1) * per]
    module = torch.nn.Sequential(*(m for layer in layers for m in (layer, torch.nn.Tanh()))).to(device)
    return PipelineStage(module, rank, world, torch.device(device))


def _traced_stage(rank, world, device, x):
    """The stage of ``rank`` split from the traced model at layer boundaries."""
    split = {f"layers.{i * LAYERS // world}": SplitPoint.BEGINNING for i in range(1, world)}
    pipe = pipeline(Net(), mb_args=(x.chunk(MICROBATCHES)[0],), split_spec=split)
    return pipe.build_stage(rank, torch.device(device))


def _train_step(rank, world, device, build):
    """One step of each schedule: the last stage's micro-batch losses, each stage's gradients."""
    results = {}
    for name, schedule_type in SCHEDULES.items():
        x, y = _batch()
        stage = build(rank, world, device, x)
        schedule = schedule_type(stage, n_microbatches=MICROBATCHES, loss_fn=F.mse_loss)
        losses = []
        if rank == 0:
            schedule.step(x.to(device))
        elif rank == world - 1:
            schedule.step(target=y.to(device), losses=losses)
        else:
            schedule.step()
        results[name] = ([loss.detach().cpu() for loss in losses],
                         [p.grad.detach().cpu() for p in stage.submod.parameters()])
    return results


def _assert_equal_ranks(neuron, cpu, world):
    for rank, (ours, reference) in enumerate(zip(neuron, cpu, strict=True)):
        for name in SCHEDULES:
            (losses, grads), (cpu_losses, cpu_grads) = ours[name], reference[name]
            assert len(losses) == (MICROBATCHES if rank == world - 1 else 0)
            torch.testing.assert_close(losses, cpu_losses, rtol=0, atol=0)
            assert len(grads) == 2 * LAYERS // world
            for a, b in zip(grads, cpu_grads, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=0)
    # Both schedules compute the same step.
    torch.testing.assert_close(neuron[-1]["gpipe"][0], neuron[-1]["1f1b"][0], rtol=0, atol=0)


@pytest.mark.slow
def test_two_stages_by_hand_equal_cpu_gloo_ranks():
    neuron = launch(_train_step, 2, "neuron", _hand_split_stage, start_method="spawn")
    cpu = launch(_train_step, 2, "cpu", _hand_split_stage, backend="gloo", start_method="spawn")
    _assert_equal_ranks(neuron, cpu, 2)


@pytest.mark.slow
def test_four_traced_stages_equal_cpu_gloo_ranks():
    neuron = launch(_train_step, 4, "neuron", _traced_stage, start_method="spawn")
    cpu = launch(_train_step, 4, "cpu", _traced_stage, backend="gloo", start_method="spawn")
    _assert_equal_ranks(neuron, cpu, 4)


def test_a_traced_stage_moves_to_neuron(neuron):
    x, _ = _batch()
    pipe = pipeline(Net(), mb_args=(x,), split_spec={"layers.2": SplitPoint.BEGINNING})
    stage = pipe.split_gm.submod_pp_0.to(neuron)        # what build_stage does with the stage's module
    assert {p.device.type for p in stage.parameters()} == {"neuron"}
    torch.testing.assert_close(stage(x.to(neuron)).cpu(), pipe.split_gm.submod_pp_0.to("cpu")(x))
