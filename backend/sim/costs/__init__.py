"""Per-instruction cost formulas, one module per engine family, registered by decorator."""
from backend.sim.costs import dma, gpsimd, host, scalar, tensor, vector  # noqa: F401  (registers formulas)
from backend.sim.costs.registry import cost, engine_cycles_ns, instruction_ns, registered_costs

__all__ = ["cost", "instruction_ns", "registered_costs", "engine_cycles_ns"]
