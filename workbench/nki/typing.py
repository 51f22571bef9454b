"""``nki.typing``: ``tensor[[shape], dtype]`` declares a kernel argument by shape only (timing)."""
from backend.nki.kernel import spec_tensor as tensor

__all__ = ["tensor"]
