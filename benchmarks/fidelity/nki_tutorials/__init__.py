"""The published NKI tutorials' kernels (NKI Beta 1), verbatim but for their imports: the fidelity
rows run them from this source (``benchmarks.fidelity.kernels``, ``mamba_kernel``)."""
