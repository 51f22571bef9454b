"""Reference models as plain ``torch.nn`` modules (``wb.models``): the one Llama every notebook,
benchmark and fidelity case runs (``llama``), its named configurations (``configs``), LoRA
adapters as peft attaches them (``lora``) and activation recomputation by named value (``remat``)."""
from workbench.models.configs import LLAMA_CONFIGS, Llama3RopeScaling, LlamaConfig, llama_config
from workbench.models.llama import Llama
from workbench.models.lora import Lora, LoraLinear, attach_lora
from workbench.models.remat import Remat

__all__ = ["Llama", "LlamaConfig", "Llama3RopeScaling", "LLAMA_CONFIGS", "llama_config", "Lora", "LoraLinear",
           "attach_lora", "Remat"]
