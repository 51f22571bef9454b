"""Helpers for the NKI front end's tests: run a small kernel, find its instructions."""
from backend.nki import run_kernel
from backend.sim import get_target

TRN2 = get_target("trn2")


def run(fn, *args, target=TRN2, **options):
    return run_kernel(fn, args, target=target, **options)


def instructions(result, engine=None, opcode=None):
    return [i for i in result.program.instructions
            if (engine is None or i.engine == engine) and (opcode is None or i.opcode == opcode)]


def cycles_ns(cycles, engine, target=TRN2):
    return cycles * 1e9 / target.clock_hz(engine)
