"""What Dynamo loads for ``torch.compile(backend="neuron")``: the ``torch_dynamo_backends``
entry point names ``neuron_backend`` here (see ``entry_point``).

Dynamo imports this module when ``torch.compile`` looks the name up, before it traces the
first frame, so loading it is the moment to prepare Dynamo (trace rules, compile callbacks);
Dynamo itself then registers the function under the entry point's name.
"""
from .backend import neuron_backend, prepare_dynamo

__all__ = ["neuron_backend"]

prepare_dynamo()
