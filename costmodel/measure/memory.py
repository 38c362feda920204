"""Memory a pass holds, measured on the meta device: bytes saved for backward, and the
high-water mark of live tensors.

- ``saved_for_backward``: every tensor autograd keeps for the backward pass passes through the
  pack hook of ``torch.autograd.graph.saved_tensors_hooks``; each storage is counted once
  (a view saved by several ops, the layer input saved by q, k and v), parameters not at all
  (they are weights, counted as such). Attributed to the innermost module running when the
  tensor was saved.
- ``live_peak``: a ``TorchDispatchMode`` adds every output storage of every op to a live set
  and a weakref finalizer removes it when its last reference dies; the high-water mark of the
  live set, less what was live before the pass (weights, cache, inputs), is the peak of the
  pass's activations in the reference model's execution order.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from costmodel.measure.reference import Transformer, build
from costmodel.spec import Spec


def _key(t: torch.Tensor) -> int:
    key: int = t.untyped_storage()._cdata
    return key


@dataclass
class Saved:
    """Bytes saved for backward: the total, and by the module that saved them (first saver)."""

    total: int = 0
    by_module: dict[str, int] = field(default_factory=dict)


def saved_for_backward(model: Transformer, run: Callable[[], Any]) -> Saved:
    """Run `run()` (a forward with grad enabled, no backward) and count what autograd keeps."""
    params = {_key(p) for p in model.parameters()}
    seen: set[int] = set()
    out = Saved()
    stack: list[str] = [""]
    names = {m: n for n, m in model.named_modules()}

    def pre(module: torch.nn.Module, _args: Any) -> None:
        stack.append(names[module])

    def post(module: torch.nn.Module, _args: Any, _out: Any) -> None:
        stack.pop()

    alive: list[torch.Tensor] = []  # held until the count is done: a freed storage's key is reused

    def pack(t: torch.Tensor) -> torch.Tensor:
        alive.append(t)
        k = _key(t)
        if k not in params and k not in seen:
            seen.add(k)
            n = t.untyped_storage().nbytes()
            out.total += n
            out.by_module[stack[-1]] = out.by_module.get(stack[-1], 0) + n
        return t

    handles = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
               torch.nn.modules.module.register_module_forward_hook(post)]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run()
    finally:
        for h in handles:
            h.remove()
    return out


class LiveBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch: unannotated
    """Live bytes of the storages ops create, and their high-water mark."""

    def __init__(self, exclude: set[int] | None = None) -> None:
        """`exclude`: storages live before the pass (weights, cache, inputs), never counted."""
        super().__init__()  # type: ignore[no-untyped-call]  # torch: unannotated
        self.live = 0
        self.peak = 0
        self._tracked: set[int] = set()
        self._exclude = exclude or set()

    def _release(self, key: int, n: int) -> None:
        self._tracked.discard(key)
        self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        result = func(*args, **(kwargs or {}))
        for t in tree_flatten(result)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                k = storage._cdata
                if k in self._tracked or k in self._exclude:
                    continue  # a view, an op writing in place, or what the pass was given
                n = storage.nbytes()
                self._tracked.add(k)
                self.live += n
                weakref.finalize(storage, self._release, k, n)
        self.peak = max(self.peak, self.live)
        return result


def training_saved(spec: Spec, batch: int, seq: int, recompute: bool = False,
                   dtype: torch.dtype = torch.bfloat16) -> Saved:
    """Bytes the reference model keeps for backward in one training step on the meta device
    (the forward and the loss, no backward), with or without full recomputation."""
    model = build(spec, "meta", dtype).recompute(recompute)
    model.train()
    ids = [torch.zeros(batch, seq, dtype=torch.long, device="meta") for _ in range(3)]
    enc = ids[2] if spec.is_encoder_decoder else None
    return saved_for_backward(model, lambda: model.loss(model(ids[0], enc), ids[1]))


def inference_live_peak(spec: Spec, phase: str, batch: int, seq: int, enc_seq: int | None = None,
                        mla: str = "naive") -> int:
    """High-water mark of the activations live in one prefill or decode pass of the reference
    model on the meta device (weights, KV cache and token ids excluded), in bf16, latent
    attention run in the convention `mla` (``costmodel.measure.latent``)."""
    from costmodel.analysis import analyze
    from costmodel.measure.latent import set_convention
    from costmodel.measure.run import phase_runner

    model = build(spec, "meta", torch.bfloat16)
    set_convention(model, mla)
    shape = analyze(spec, phase, batch=batch, seq=seq, enc_seq=enc_seq).shape
    run = phase_runner(model, phase, dict(shape))
    # everything live before the pass (weights, the cache the runner made, the ids) is excluded
    with warnings.catch_warnings():  # isinstance() on every object trips deprecation shims
        warnings.simplefilter("ignore")
        before = {_key(t) for t in gc.get_objects() if isinstance(t, torch.Tensor)}
    live = LiveBytes(before)
    with live:
        run()
    return live.peak
