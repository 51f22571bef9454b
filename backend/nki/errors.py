"""NKI-style errors: the error code the NKI front end names, and a message saying what to change."""
from __future__ import annotations

__all__ = ["NKIError", "nki_error"]


class NKIError(ValueError):
    """A kernel broke an NKI rule (tile limits, memory spaces, indexing); ``code`` is NKI's error
    code (``err_num_partition_exceed_arch_limit``, ...), also the message's last words."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{message} [{code}]")
        self.code = code


def nki_error(code: str, message: str) -> NKIError:
    return NKIError(code, message)
