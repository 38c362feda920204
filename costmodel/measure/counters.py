"""What a run does, counted from the ops PyTorch dispatches.

- Matmul FLOPs: ``torch.utils.flop_counter.FlopCounterMode``, which counts 2*M*K*N for every
  mm, addmm, bmm and baddbmm (and convolutions, attention kernels), forward and backward.
- Bytes touched: ``ByteCounter``, a dispatch mode that adds, for every aten op, the bytes of
  each tensor it reads and each tensor it writes. Conventions (docs/measure.md):
  views (view, transpose, expand, slice ...) move nothing; a broadcast (stride-0) dimension is
  read once; a tensor written in place (copy_) counts once, as a write; an indexed read or
  write (embedding, index_copy_) moves the rows it gathers or scatters, not the whole table;
  allocating an empty tensor moves nothing.
Both attribute their counts to the innermost module running (``ModuleTracker``), forward and
backward, so a count can be joined to the formula of the component that module implements.

``MetaShapes`` speeds up the meta device: torch's meta kernels for pointwise ops, reductions
and concatenation are Python reference code (about 250 us an op, ten times a matmul's), which
made counting a 405B training step take seconds. For the commonest of those ops the output is
fixed by the inputs' shapes and dtypes alone, so ``MetaShapes`` returns it directly; every
other op, and every op on a real device, runs torch's own kernel. Counting is unchanged:
FLOPs come from matmul shapes, bytes from shapes and strides (outputs are dense either way).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode
from torch.utils.module_tracker import ModuleTracker

aten = torch.ops.aten

#: Ops that return an alias of their input, or allocate without writing: no memory traffic.
#: (``OpOverload.is_view`` covers those whose schema says so; these run as views regardless.)
FREE_OPS = {
    aten._unsafe_view.default, aten.lift_fresh.default, aten.empty.memory_format,
    aten.empty_strided.default, aten.empty_like.default, aten.new_empty.default,
    aten.new_empty_strided.default, aten.detach.default,
}


def touched(t: torch.Tensor) -> int:
    """Bytes of the memory a tensor addresses: a broadcast (stride 0) dimension counts once."""
    elements = math.prod(n for n, stride in zip(t.shape, t.stride(), strict=True) if stride != 0)
    return elements * t.element_size()


def op_bytes(func: Any, args: Any, kwargs: Any, out: Any) -> int:
    """Bytes one op reads (its tensor arguments) and writes (its outputs); an output that is an
    argument (in place) is a write only. An indexed read (embedding lookup) reads the rows it
    gathers, not its whole table; an indexed write (index_copy_) writes the rows it copies,
    not its whole destination."""
    if func is aten.embedding.default:  # (table, ids) -> rows
        return touched(args[1]) + 2 * touched(out)
    if func is aten.index_copy_.default:  # (destination, dim, index, rows)
        return touched(args[2]) + 2 * touched(args[3])
    inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
    outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    written = {id(o) for o in outputs}
    read = sum(touched(t) for t in inputs if id(t) not in written)
    return read + sum(touched(t) for t in outputs)


# torch's TorchDispatchMode, FlopCounterMode and ModuleTracker are unannotated: their __init_subclass__,
# __init__, __enter__ and __exit__ are untyped calls (the ignores below say no-untyped-call).
class ByteCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Sums the bytes of every aten op dispatched while active, per innermost module."""

    def __init__(self, tracker: ModuleTracker) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tracker = tracker
        self.by_module: dict[str, int] = defaultdict(int)

    @property
    def total(self) -> int:
        return sum(self.by_module.values())

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view or func in FREE_OPS:
            return out
        self.by_module[innermost(self.tracker.parents)] += op_bytes(func, args, kwargs, out)
        return out


def innermost(parents: set[str]) -> str:
    """The deepest running module: its name extends every other's."""
    return max(parents, key=len)


class Counts:
    """Matmul FLOPs and bytes of everything run inside ``with Counts() as c:``, per module."""

    def __init__(self, count_bytes: bool = True) -> None:
        self.flops = FlopCounterMode(display=False)
        self.tracker = ModuleTracker() if count_bytes else None
        self.bytes = ByteCounter(self.tracker) if self.tracker is not None else None

    def __enter__(self) -> Counts:
        self.flops.__enter__()  # type: ignore[no-untyped-call]
        if self.tracker is not None:
            self.tracker.__enter__()  # type: ignore[no-untyped-call]
        if self.bytes is not None:  # there is a byte counter when there is a tracker
            self.bytes.__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bytes is not None:
            self.bytes.__exit__(*exc)  # type: ignore[no-untyped-call]
        if self.tracker is not None:
            self.tracker.__exit__(*exc)  # type: ignore[no-untyped-call]
        self.flops.__exit__(*exc)  # type: ignore[no-untyped-call]

    @property
    def total_flops(self) -> int:
        return self.flops.get_total_flops()

    @property
    def total_bytes(self) -> int:
        return self.bytes.total if self.bytes is not None else 0

    def flops_by_module(self) -> dict[str, int]:
        """FLOPs of each module not counted in a deeper one (FlopCounterMode's are inclusive)."""
        inclusive = {name: sum(ops.values()) for name, ops in self.flops.get_flop_counts().items()}
        names = sorted(inclusive, key=len, reverse=True)
        exclusive = dict(inclusive)
        for name in names:
            parent = _parent(name, inclusive)
            if parent is not None:
                exclusive[parent] -= inclusive[name]
        return {n: v for n, v in exclusive.items() if v}

    def bytes_by_module(self) -> dict[str, int]:
        return dict(self.bytes.by_module) if self.bytes is not None else {}


def _parent(name: str, names: dict[str, int]) -> str | None:
    """The nearest enclosing module that has a count ("Global" encloses everything)."""
    if name == "Global":
        return None
    head = name
    while "." in head:
        head = head.rpartition(".")[0]
        if head in names:
            return head
    return "Global" if "Global" in names else None


# --- a faster meta device -----------------------------------------------------------------------

_POINTWISE = {
    aten.mul.Tensor, aten.mul.Scalar, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor,
    aten.div.Scalar, aten.neg.default, aten.rsqrt.default, aten.pow.Tensor_Scalar, aten.exp.default,
    aten.cos.default, aten.sin.default, aten.tanh.default, aten.relu.default, aten.silu.default,
    aten.masked_fill.Scalar, aten.tanh_backward.default, aten.silu_backward.default,
    aten.threshold_backward.default,
}
_POINTWISE_KW = {aten.gelu.default, aten.gelu_backward.default}  # approximate="tanh"
_REDUCTIONS = {aten.sum.dim_IntList, aten.mean.dim}


class MetaShapes(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Output shapes of common float ops on meta tensors, without torch's Python meta kernels.

    Enter it before the counters, so that they see every op first.
    """

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if all(t.device.type == "meta" for t in _tensors(args)):
            out = _outputs(func, args, kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


def _tensors(args: tuple[Any, ...]) -> list[torch.Tensor]:
    """Tensor arguments, and those in a list argument (cat); cheaper than a tree walk."""
    out: list[torch.Tensor] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(t for t in a if isinstance(t, torch.Tensor))
    return out


def _empty(shape: Iterable[int], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(list(shape), dtype=dtype, device="meta")


def _outputs(func: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> torch.Tensor | tuple[torch.Tensor | None, ...] | None:
    """The op's output (empty meta tensors of the right shapes and dtypes), or None to let
    torch compute it."""
    if func in _POINTWISE and not kwargs or func in _POINTWISE_KW and set(kwargs) <= {"approximate"}:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not all(t.is_floating_point() or t.dtype == torch.bool for t in tensors):
            return None
        values = [a for a in args if not (isinstance(a, torch.Tensor) and a.dtype == torch.bool)]
        dtype = torch.result_type(*values[:2]) if len(values) > 1 else values[0].dtype
        shape = torch.broadcast_shapes(*(t.shape for t in tensors))  # type: ignore[no-untyped-call]  # torch: unannotated
        return _empty(shape, dtype)
    if func is aten.addmm.default and not kwargs:
        return _empty((args[1].shape[0], args[2].shape[1]), args[1].dtype)
    if func in _REDUCTIONS and set(kwargs) <= {"dtype"}:
        x, dims, keep = args[0], args[1], args[2] if len(args) > 2 else False
        if not dims or not x.is_floating_point():
            return None
        dims = {d % x.dim() for d in dims}
        shape = [1 if i in dims else n for i, n in enumerate(x.shape) if keep or i not in dims]
        return _empty(shape, kwargs.get("dtype") or x.dtype)
    if func is aten.cat.default and not kwargs:
        tensors, dim = args[0], args[1] if len(args) > 1 else 0
        if len({t.dim() for t in tensors}) != 1 or len({t.dtype for t in tensors}) != 1:
            return None
        shape = list(tensors[0].shape)
        dim %= len(shape)
        shape[dim] = sum(t.shape[dim] for t in tensors)
        return _empty(shape, tensors[0].dtype)
    if func is aten._softmax.default and not args[2]:
        return _empty(args[0].shape, args[0].dtype)
    if func is aten._softmax_backward_data.default:
        return _empty(args[0].shape, args[3])
    if func in (aten._to_copy.default, aten.clone.default) and set(kwargs) <= {"dtype"}:
        return _empty(args[0].shape, kwargs.get("dtype") or args[0].dtype)
    if func is aten.native_layer_norm.default:
        x, normalized = args[0], len(args[1])
        stats = [*x.shape[:-normalized], *[1] * normalized]
        return _empty(x.shape, x.dtype), _empty(stats, torch.float32), _empty(stats, torch.float32)
    if func is aten.native_layer_norm_backward.default:
        x, weight, bias, mask = args[1], args[5], args[6], args[7]
        return tuple(_empty(t.shape, t.dtype) if wanted and t is not None else None
                     for t, wanted in zip((x, weight, bias), mask, strict=True))
    return None
