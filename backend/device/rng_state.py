"""Philox-shaped RNG states for the simulated devices (``torch.neuron.get_rng_state()``).

A CUDA generator's state is 16 bytes, ``(seed: uint64, offset: uint64)``: its Philox stream
``offset`` values past ``seed``. DTensor's RNG tracker reads and writes exactly that shape (its
``_PhiloxState``): for a random op on a sharded tensor it starts each rank's shard at
``offset + shard index x shard numel`` and leaves every rank at ``offset + numel``, so the
shards together draw what one device would have drawn. FSDP2's meta-device init
(``to_empty`` + ``reset_parameters``) goes through it.

Device values come from the host's Mersenne-Twister generator (so they equal CPU's), whose
state is 5056 bytes, so a device state names a position of that host generator plus an offset:

- ``seed``: right after ``manual_seed(s)`` the position is ``s`` itself, which any process can
  rebuild. Elsewhere it is a key into this process's table of positions read so far: the top bit
  set over a hash of the host state, so ranks in equal states read equal keys.
- ``offset``: host draws past that position, in the unit the host kernels draw (one 32-bit value
  per float32 element of ``rand``/``randn``/``uniform_``/``normal_``; CPU's ``normal_`` draws 16
  more when the element count is not a multiple of 16).

Setting a state puts the host generator at the position and discards ``offset`` draws, so a
state read and set again restores the generator exactly (``fork_rng``, activation
checkpointing), and the 5056-byte CPU state is still accepted.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict

import torch

__all__ = ["philox_state", "set_philox_state", "PHILOX_STATE_BYTES", "POSITIONS"]

PHILOX_STATE_BYTES = 16
_KEY_BIT = 1 << 63
_DISCARD_CHUNK = 1 << 24     # draws per discarding kernel call (one byte each)


class Positions:
    """Host generator states read as device states in this process, by key (least recently
    read dropped first, so the table stays small across a long run of checkpointed steps)."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._states: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._fresh: dict[int, torch.Tensor] = {}   # seed -> the state manual_seed(seed) gives

    def key(self, host_state: torch.Tensor, initial_seed: int) -> int:
        """The seed field naming ``host_state``: ``initial_seed`` for a just-seeded generator."""
        if torch.equal(host_state, self.fresh(initial_seed)) and not initial_seed & _KEY_BIT:
            return initial_seed
        key = int.from_bytes(hashlib.blake2b(host_state.numpy().tobytes(), digest_size=8).digest(),
                             "little") | _KEY_BIT
        self._states[key] = host_state
        self._states.move_to_end(key)
        while len(self._states) > self.capacity:
            self._states.popitem(last=False)
        return key

    def fresh(self, seed: int) -> torch.Tensor:
        state = self._fresh.get(seed)
        if state is None:
            if len(self._fresh) > 64:
                self._fresh.clear()
            state = self._fresh[seed] = torch.Generator().manual_seed(seed).get_state()
        return state

    def host_state(self, seed: int) -> torch.Tensor:
        if not seed & _KEY_BIT:
            return self.fresh(seed)
        state = self._states.get(seed)
        if state is None:
            raise RuntimeError(
                f"this RNG state names a generator position ({seed:#x}) that this process never "
                f"read (states read with get_rng_state() are known only in the process, and "
                f"rank, that read them, for the last {self.capacity} reads); seed every rank "
                f"with torch.manual_seed(seed) instead of copying generator states between them")
        return state

    def clear(self) -> None:
        self._states.clear()
        self._fresh.clear()


POSITIONS = Positions()


def philox_state(generator: torch._C.Generator) -> torch.Tensor:
    """``generator``'s state as 16 bytes (seed, offset) of uint8, offset 0."""
    key = POSITIONS.key(torch._C.Generator.get_state(generator), generator.initial_seed())
    return torch.frombuffer(bytearray(key.to_bytes(8, "little") + bytes(8)), dtype=torch.uint8)


def set_philox_state(generator: torch._C.Generator, state: torch.Tensor) -> None:
    """Put ``generator`` where a 16-byte (seed, offset) state says (a CPU state as on CPU)."""
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
        raise TypeError(f"RNG state must be a torch.ByteTensor, got {type(state).__name__}"
                        f"{'' if not isinstance(state, torch.Tensor) else ' of ' + str(state.dtype)}")
    state = state.detach().cpu().contiguous()
    if state.numel() != PHILOX_STATE_BYTES:
        torch._C.Generator.set_state(generator, state)   # PyTorch checks a full CPU state's size
        return
    raw = state.numpy().tobytes()
    seed, offset = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little", signed=True)
    if offset < 0:
        raise RuntimeError(f"RNG state offset must be non-negative, got {offset}")
    torch._C.Generator.set_state(generator, POSITIONS.host_state(seed))
    while offset:
        draws = min(offset, _DISCARD_CHUNK)
        torch.empty(draws, dtype=torch.uint8).random_(generator=generator)
        offset -= draws
