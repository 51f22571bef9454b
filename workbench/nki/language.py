"""``nki.language`` (``nl``): see ``backend.nki.language``."""
from backend.nki.language import *  # noqa: F401,F403
from backend.nki.language import __all__  # noqa: F401
