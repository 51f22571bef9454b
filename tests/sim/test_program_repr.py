"""A Program reads as what it is: its name, kind and hardware instructions per engine and opcode."""
from backend.sim.ir import Instruction, Program


def test_program_repr_counts_hardware_instructions_per_engine_and_opcode():
    p = Program("aten::mm")
    p.add(Instruction("dma", "dma_copy", nbytes=2**20))
    p.add(Instruction("tensor", "nc_matmul", repeat=4, deps=(0,)))
    p.add(Instruction("tensor", "nc_matmul", repeat=2, deps=(1,)))
    assert repr(p) == "Program('aten::mm', op: dma dma_copy x1, tensor nc_matmul x6; 1 MiB DMA)"
    assert repr(Program("aten::view", "view")) == "Program('aten::view', view: no instructions)"
