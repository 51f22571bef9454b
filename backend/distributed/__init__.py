"""``torch.distributed`` on the simulated device: the ``"neuron"`` process-group backend,
and ``"nccl"`` while CUDA emulation is on.

Real ranks exchange values over gloo, so a job's results equal the same job on CPU ranks; one
rank of a large world runs on PyTorch's fake process group. Either way each collective is
reported to the op stream and priced on an interconnect topology (``backend.sim.topology``).
"""
from .backend import BACKEND_NAME, TOPOLOGY_ENV, NeuronOptions, bind_local_core, create_process_group, is_registered
from .nccl import NCCL_NAME, create_nccl_process_group, node_topology
from .registration import register
from .info import distributed_info
from .dependencies import WAIT_OP, WAITS_FOR, report_wait
from .process_group import NeuronProcessGroup
from .reporting import report_collective

__all__ = ["BACKEND_NAME", "TOPOLOGY_ENV", "NeuronOptions", "NeuronProcessGroup", "create_process_group",
           "NCCL_NAME", "create_nccl_process_group", "node_topology",
           "is_registered", "register", "bind_local_core", "distributed_info", "report_collective", "report_wait", "WAIT_OP", "WAITS_FOR"]
