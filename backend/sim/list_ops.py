"""Which tensors of a flattened multi-tensor op (``_foreach_*``, fused optimizers) are read and written.

The device records a list op's tensors flattened, list after list, and an in-place list op
(``_foreach_add_``, ``_fused_adamw_``) returns nothing, so its record lists no outputs: what it
writes is known only from the op. The per-list length comes from the outputs (out-of-place ops
return one list), a ``scalars`` list, or the op's list arity (a ``scalar``/``weight`` argument
means one list fewer; a trailing lone tensor is the Tensor overload's scalar). Per-tensor
scalars left over after the lists (state steps, ``grad_scale``/``found_inf``, a Tensor overload's
scalar) are a few bytes each and count as neither read nor written.

Both the NeuronCore lowering and the GPU/TPU cost models take their list structure from here,
so they stream the same bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.sim.descriptors import OpRecord, TensorDesc

__all__ = ["FOREACH_LIST_ARITY", "FUSED_OPTIMIZER_LISTS", "FusedLists", "foreach_op", "foreach_lists",
           "foreach_read_lists", "fused_optimizer_lists", "inplace_list_tensors"]

# tensor lists of the List overload of each binary/ternary ``_foreach_`` op; others have one list
FOREACH_LIST_ARITY = {
    **dict.fromkeys(("add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow",
                     "copy"), 2),
    **dict.fromkeys(("addcmul", "addcdiv", "lerp"), 3),
}
_SCALAR_ARGS = ("scalar", "weight", "exponent")


@dataclass(frozen=True, slots=True)
class FusedLists:
    """List structure of a fused optimizer: ``lists`` tensor lists, the first ``read`` of them
    streamed in (a trailing state-step list is per-tensor scalars), those at ``written`` stored.
    ``extra_lists``: state lists the variant adds (amsgrad's ``max_exp_avg_sqs``: +1) or drops
    (SGD without momentum: -1) relative to the plain optimizer."""

    lists: int
    read: int
    written: tuple[int, ...]
    extra_lists: int = 0


# adam's lists are params, grads, exp_avgs, exp_avg_sqs, [max_exp_avg_sqs,] state_steps;
# adagrad's params, grads, state_sums, state_steps; sgd's params, grads, momentum_buffers.
FUSED_OPTIMIZER_LISTS = {
    "_fused_adam_": FusedLists(5, 4, (0, 2, 3)),
    "_fused_adamw_": FusedLists(5, 4, (0, 2, 3)),
    "_fused_sgd_": FusedLists(3, 3, (0, 2)),
    "_fused_adagrad_": FusedLists(4, 3, (0, 2)),
}


def foreach_op(name: str) -> str:
    """``"aten::_foreach_add_"`` -> ``"add"``."""
    return name.split("::")[-1].removeprefix("_foreach_").rstrip("_")


def _same_shapes(a, b) -> bool:
    return [t.shape for t in a] == [t.shape for t in b]


def foreach_lists(name: str, inputs: tuple, outputs: tuple, attrs: dict) -> tuple[int, int]:
    """(list length n, tensor lists) of a flattened ``_foreach_*`` record."""
    if outputs:
        return len(outputs), max(1, len(inputs) // len(outputs))
    if isinstance(attrs.get("scalars"), list) and attrs["scalars"]:
        n = len(attrs["scalars"])
        return n, max(1, len(inputs) // n)
    arity = FOREACH_LIST_ARITY.get(foreach_op(name), 1)
    if any(attrs.get(k) is not None for k in _SCALAR_ARGS):
        arity -= 1
    arity = max(1, arity)
    total = len(inputs)
    if total % arity == 0:
        n = total // arity
        if arity == 1 or _same_shapes(inputs[:n], inputs[n:2 * n]):
            return n, arity
    # Tensor overload: a lone scalar tensor last, in place of a binary op's second list
    lists = arity if arity >= 3 else 1
    return max(1, (total - 1) // lists), lists


def foreach_read_lists(op: str, lists: int) -> int:
    """Lists a ``_foreach_<op>`` streams in: all of them, but ``zero`` only writes."""
    return 0 if op == "zero" else lists


def fused_optimizer_lists(name: str, attrs: dict) -> FusedLists:
    """The lists a fused optimizer record reads and writes, for its variant (amsgrad, momentum)."""
    plain = FUSED_OPTIMIZER_LISTS[name.split("::")[-1]]
    if attrs.get("amsgrad"):
        return FusedLists(plain.lists + 1, plain.read + 1, (*plain.written, 4), 1)
    if "sgd" in name and not attrs.get("momentum"):
        return FusedLists(plain.lists - 1, plain.read - 1, (0,), -1)
    return plain


def inplace_list_tensors(record: OpRecord) -> tuple[tuple[TensorDesc, ...], tuple[TensorDesc, ...]] | None:
    """(tensors read, tensors written) of an in-place list op, whose record lists no outputs;
    None for any other record (its outputs say what it writes)."""
    if record.outputs:
        return None
    op = record.name.split("::")[-1]
    if op in FUSED_OPTIMIZER_LISTS:
        fused = fused_optimizer_lists(record.name, record.attrs)
        n = max(1, len(record.inputs) // fused.lists)
        read, written = range(fused.read), fused.written
    elif op.startswith("_foreach_") and op.endswith("_"):
        n, lists = foreach_lists(record.name, record.inputs, record.outputs, record.attrs)
        read, written = range(foreach_read_lists(foreach_op(op), lists)), (0,)
    else:
        return None

    def tensors(positions) -> tuple[TensorDesc, ...]:
        return tuple(t for j in positions for t in record.inputs[j * n:(j + 1) * n])

    return tensors(read), tensors(written)
