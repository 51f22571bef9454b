"""``nki.isa`` (``nisa``): see ``backend.nki.isa``."""
from backend.nki.isa import *  # noqa: F401,F403
from backend.nki.isa import __all__  # noqa: F401
