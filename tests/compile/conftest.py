"""Compile tests: Dynamo's caches and the compiled-graph log fresh, the backend registered."""
import pytest
import torch

import backend.compile


@pytest.fixture(autouse=True)
def fresh_compile():
    torch._dynamo.reset()
    backend.compile.register()      # after reset: reset clears Dynamo's compile callbacks
    backend.compile.reset()
    yield
    torch._dynamo.reset()
