"""CUDA emulation: run unmodified CUDA-written PyTorch code on a CPU-only build.

    from backend.device.cuda_emulation import emulate_cuda
    with emulate_cuda("h100"):          # torch.cuda.is_available() is True inside
        model = Net().cuda()            # tensors report cuda:0; costs from the GPU model

``redirect=True`` runs the same code on the ``neuron`` device instead. See emulation.py for
what is changed and how ``disable()`` restores it.
"""
from .device import GPU_MODELS, EmulatedDevice, EmulatedDeviceProperties
from .emulation import EXTENSIONS, current, disable, emulate_cuda, enable, is_enabled

__all__ = ["enable", "disable", "is_enabled", "emulate_cuda", "current", "EmulatedDevice",
           "EmulatedDeviceProperties", "GPU_MODELS", "EXTENSIONS"]
