"""The NKI kernel front end: kernels written in NKI's Python dialect run on the simulated
NeuronCore, as instructions (costed and scheduled like every lowering's) and as numpy values.

Dialect: NKI Beta 1 (``neuronxcc.nki`` as in Neuron SDK 2.20-2.26), the one the published
tutorials (matrix multiplication, fused Mamba, RMSNorm, LayerNorm) are written in: ``nl.load`` /
``nl.store``, ``nl.arange`` / ``nl.mgrid`` index grids, ``mask=``, ``nl.par_dim`` and ``nisa``
calls that return their result. NKI 0.2 (Beta 2) removed ``arange``, ``mask=`` and ``par_dim``
and made ``dst`` the first argument of ``nisa`` calls, so the tutorials as published do not run
there unchanged.

Beside ``backend.lowering`` (whose ``Builder`` it emits through); imports no torch. Modules:
``dtypes``, ``errors``, ``indexing`` (tile indexing), ``tensors`` (HBM/SBUF/PSUM tensors and
views), ``tracer`` (dependencies, buffers, footprint), ``alu`` (operators), ``instructions``
(the ISA: limits, costs, numpy values), ``language`` (``nl``), ``isa`` (``nisa``), ``kernel``
(``run_kernel``), ``lowering`` (kernels as ops in an op stream).
"""
from backend.nki import isa, language, lowering  # noqa: F401  (lowering: registers nki::*)
from backend.nki.errors import NKIError
from backend.nki.kernel import KernelRun, TensorSpec, run_kernel, spec_tensor
from backend.nki.tracer import DEFAULT_BUFFERS

NKI_VERSION = "Beta 1 (neuronxcc.nki, Neuron SDK 2.26)"

__all__ = ["isa", "language", "NKIError", "KernelRun", "TensorSpec", "run_kernel", "spec_tensor",
           "DEFAULT_BUFFERS", "NKI_VERSION"]
