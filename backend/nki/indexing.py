"""NKI tile indexing: integers, slices, ``...`` and index grids (``nl.arange`` / ``nl.mgrid``).

An index resolves to what numpy needs to read or write the elements, the shape of the resulting
tile (NKI keeps a partition axis: a 1-D result becomes ``[n, 1]``), the box of elements it touches
(for dependency tracking) and each axis's extent (for DMA descriptor sizes). Index grids are
plain integer numpy arrays shaped for broadcasting (``nl.arange(128)[:, None]``), so ``i * 128 +
ix`` and masks such as ``ix < rows`` are numpy expressions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from backend.nki.errors import nki_error

__all__ = ["Resolved", "resolve", "boxes_overlap", "box_contains", "whole_box", "GridIndex", "mgrid"]


@dataclass(frozen=True, slots=True)
class Resolved:
    index: tuple            # numpy index into the storage array
    shape: tuple            # the tile shape this index selects (partition axis first)
    box: tuple              # ((lo, hi), ...) per storage axis
    extents: tuple          # elements touched per storage axis
    contiguous: tuple       # per storage axis: the touched elements form one unit-stride run
    advanced: bool          # index uses grids (numpy fancy indexing)
    clipped: bool = False   # grid indices ran past the end (only a mask makes that legal)


def whole_box(shape) -> tuple:
    return tuple((0, n) for n in shape)


def boxes_overlap(a: tuple, b: tuple) -> bool:
    for (alo, ahi), (blo, bhi) in zip(a, b):
        if alo >= bhi or blo >= ahi:
            return False
    return True


def box_contains(outer: tuple, inner: tuple) -> bool:
    return all(olo <= ilo and ihi <= ohi for (olo, ohi), (ilo, ihi) in zip(outer, inner))


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _expand(shape: tuple, key) -> list:
    key = list(key) if isinstance(key, tuple) else [key]
    if any(k is Ellipsis for k in key):
        at = next(i for i, k in enumerate(key) if k is Ellipsis)
        fill = len(shape) - (len(key) - 1)
        key = key[:at] + [slice(None)] * fill + key[at + 1:]
    if len(key) > len(shape):
        raise nki_error("err_tensor_access_out_of_bound",
                        f"index with {len(key)} entries into a tensor of rank {len(shape)} {list(shape)}")
    return key + [slice(None)] * (len(shape) - len(key))


def resolve(shape: tuple, key, *, clip: bool = False) -> Resolved:
    """Resolve ``key`` against a tensor of ``shape``. ``clip``: grid indices past the end are
    allowed (a mask will exclude them) and clamped for the value access."""
    key = _expand(shape, key)
    grids = [k for k in key if isinstance(k, np.ndarray) and k.ndim > 0]
    if not grids:
        return _resolve_basic(shape, key)
    return _resolve_grid(shape, key, grids, clip)


def _resolve_basic(shape, key) -> Resolved:
    index, out, box, extents, contiguous = [], [], [], [], []
    for n, k in zip(shape, key):
        if _is_int(k) or (isinstance(k, np.ndarray) and k.ndim == 0):
            k = int(k)
            if not -n <= k < n:
                raise nki_error("err_tensor_access_out_of_bound", f"index {k} is out of bounds for an axis of size {n}")
            k %= n
            index.append(k)
            box.append((k, k + 1))
            extents.append(1)
            contiguous.append(True)
        elif isinstance(k, slice):
            start, stop, step = k.indices(n)
            if k.stop is not None and (k.stop > n or (k.start or 0) < -n):
                raise nki_error("err_tensor_access_out_of_bound",
                                f"slice {k.start}:{k.stop} is out of bounds for an axis of size {n}")
            count = len(range(start, stop, step))
            if count == 0:
                raise nki_error("err_tensor_access_out_of_bound", f"empty slice {k.start}:{k.stop} of an axis of size {n}")
            index.append(slice(start, stop, step))
            out.append(count)
            last = start + (count - 1) * step
            box.append((min(start, last), max(start, last) + 1))
            extents.append(count)
            contiguous.append(step == 1)
        else:
            raise TypeError(f"unsupported NKI index {k!r}: use ints, slices, ... or nl.arange grids")
    return Resolved(tuple(index), _tile_shape(out), tuple(box), tuple(extents), tuple(contiguous), False)


def _resolve_grid(shape, key, grids, clip) -> Resolved:
    rank = max(g.ndim for g in grids)
    free_axes = [i for i, k in enumerate(key) if not _is_int(k)]
    if len(free_axes) != rank and any(isinstance(key[i], slice) for i in free_axes):
        raise nki_error("err_unsupported_mixing_basic_advanced_tensor_indexing",
                        "mixing slices with index grids needs one grid axis per sliced axis")
    index, box, extents, contiguous = [], [], [], []
    clipped = False
    for axis, (n, k) in enumerate(zip(shape, key)):
        if _is_int(k):
            k = int(k) % n if -n <= int(k) < n else int(k)
            if not 0 <= k < n:
                raise nki_error("err_tensor_access_out_of_bound", f"index {k} is out of bounds for an axis of size {n}")
            index.append(k)
            box.append((k, k + 1))
            extents.append(1)
            contiguous.append(True)
            continue
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            at = free_axes.index(axis)
            k = np.arange(start, stop, step).reshape([-1 if d == at else 1 for d in range(rank)])
        k = np.asarray(k)
        if k.dtype.kind not in "iu":
            raise TypeError(f"index grids must be integers, got {k.dtype}")
        lo, hi, count, unit = _span(k)
        if lo < 0 or (hi >= n and not clip):
            raise nki_error("err_tensor_access_out_of_bound",
                            f"index range [{lo}, {hi}] is out of bounds for an axis of size {n}; "
                            "pass a mask= that excludes the elements past the end")
        clipped = clipped or hi >= n
        index.append(np.clip(k, 0, n - 1) if clip and hi >= n else k)
        box.append((lo, min(hi, n - 1) + 1))
        extents.append(count)
        contiguous.append(unit)
    out = np.broadcast_shapes(*(np.shape(i) for i in index if isinstance(i, np.ndarray)))
    return Resolved(tuple(index), _tile_shape(list(out)), tuple(box), tuple(extents), tuple(contiguous), True,
                    clipped)


def _span(k: np.ndarray) -> tuple:
    """(lowest, highest, distinct values, whether they are one unit-stride run) of a grid axis;
    a grid from ``nl.arange`` varies along one axis, which is the fast case."""
    if sum(d > 1 for d in k.shape) <= 1:
        flat = k.reshape(-1)
        first, last = int(flat[0]), int(flat[-1])
        if flat.size < 3 or last - first + 1 == flat.size and (np.diff(flat) == 1).all():
            lo, hi = min(first, last), max(first, last)
            return lo, hi, flat.size, hi - lo + 1 == flat.size
    values = np.unique(k)
    lo, hi = int(values[0]), int(values[-1])
    return lo, hi, len(values), hi - lo + 1 == len(values)


def _tile_shape(out: list) -> tuple:
    if not out:
        return (1, 1)
    if len(out) == 1:
        return (out[0], 1)
    return tuple(out)


class GridIndex(tuple):
    """``nl.mgrid[0:128, 0:512]``: unpacks to its axes; ``.p`` is the partition axis and ``.x``,
    ``.y``, ``.z`` the free axes, each shaped to broadcast against the others."""

    @property
    def p(self):
        return self[0]

    @property
    def x(self):
        return self[1]

    @property
    def y(self):
        return self[2]

    @property
    def z(self):
        return self[3]


class _MGrid:
    def __getitem__(self, key) -> GridIndex:
        key = key if isinstance(key, tuple) else (key,)
        rank = len(key)
        axes = []
        for d, k in enumerate(key):
            if not isinstance(k, slice):
                raise TypeError("nl.mgrid takes slices, e.g. nl.mgrid[0:128, 0:512]")
            start, stop, step = k.start or 0, k.stop, k.step or 1
            axes.append(np.arange(start, stop, step).reshape([-1 if i == d else 1 for i in range(rank)]))
        return GridIndex(axes)


mgrid = _MGrid()
