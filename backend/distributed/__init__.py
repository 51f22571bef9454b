"""``torch.distributed`` on the simulated device: the ``"neuron"`` process-group backend.

Real ranks exchange values over gloo, so a job's results equal the same job on CPU ranks; one
rank of a large world runs on PyTorch's fake process group. Either way each collective is
reported to the op stream and priced on an interconnect topology (``backend.sim.topology``).
"""
from .backend import BACKEND_NAME, TOPOLOGY_ENV, NeuronOptions, create_process_group, is_registered, register
from .info import distributed_info
from .dependencies import WAIT_OP, WAITS_FOR, report_wait
from .process_group import NeuronProcessGroup
from .reporting import report_collective

__all__ = ["BACKEND_NAME", "TOPOLOGY_ENV", "NeuronOptions", "NeuronProcessGroup", "create_process_group",
           "is_registered", "register", "distributed_info", "report_collective", "report_wait", "WAIT_OP", "WAITS_FOR"]
