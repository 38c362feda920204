"""FLOP share against time share by operator class: the question of Ivanov et al. 2021.

Ivanov, Dryden, Ben-Nun, Li and Hoefler, "Data Movement Is All You Need: A Case Study on
Optimizing Transformers" (MLSys 2021, arXiv:2007.00072), Table 1, sort a transformer's operators
into three classes and find, for BERT-large's encoder layer training in PyTorch on a V100, that
tensor contractions are 99.80% of the FLOPs and 61.0% of the time, statistical normalisations
0.17% and 25.5%, element-wise operators 0.03% and 13.5%: the operators that do almost no
arithmetic take over a third of the time, because they move data.

The classes, here (``op_class``, the one place they are decided), from a component's structured
``Key`` and whether it runs products:

- **tensor contraction**: every component with matrix products (``Row.flops_matmul``): the
  projections, the attention core's QK^T and PV, the FFN's, a router's gate, the heads. Its
  matmul FLOPs, its bytes and its time count here; its other FLOPs (a projection's bias add,
  counted on the projection's component) count as element-wise, as Ivanov et al. count a bias;
- **statistical normalisation**: the softmax (the attention core's ``softmax`` leaf and the
  attention sinks joined to it), the norms (``Role.norm``: layernorm, RMSNorm, QK-norm), the loss
  (a log-softmax over the vocabulary) and a router's top-k softmax (``Role.router`` without
  products);
- **element-wise**: everything else: biases, activations, dropout, residual adds, the score
  scale, masks and soft-caps, RoPE and position biases, and the data-movement leaves Ivanov et
  al.'s encoder layer has none of (embedding lookups and KV-cache writes: per-element copies).

A component's time is the time model's (``runtime.timing.predict``) under the kernels asked for:
with ``eager`` (nothing fused) each component is its own kernels, as Ivanov et al.'s PyTorch
baseline runs; under ``flash`` the softmax runs inside the attention kernel, whose time is the
scores row's, a contraction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from costmodel.analysis import Analysis, Row
from costmodel.components.key import Key, Role
from costmodel.runtime.timing import Prediction

__all__ = ["IVANOV_2021", "ClassShare", "ClassShares", "OpClass", "by_class", "op_class"]


class OpClass(str, Enum):
    """Ivanov et al. 2021's operator classes (section 2.2, Table 1)."""

    contraction = "tensor contraction"
    normalization = "statistical normalization"
    elementwise = "element-wise"


#: Roles whose non-product work is a statistical normalisation (a reduction over a row, then a
#: rescale of it): the norms, the loss's log-softmax, a router's softmax and top-k.
NORMALIZING = frozenset({Role.norm, Role.loss, Role.router})
#: Leaves of the attention core that are the softmax: the softmax, and the sinks' logits joined to it.
SOFTMAX_LEAVES = frozenset({"softmax", "sinks"})


def op_class(key: Key, products: bool) -> OpClass:
    """The class of a component: `products` is whether it runs matrix products (its matmul
    FLOPs; their bias adds are element-wise, ``flop_split``)."""
    if products:
        return OpClass.contraction
    if key.role in NORMALIZING or key.leaf in SOFTMAX_LEAVES and key.role in (Role.attention_core, Role.sink):
        return OpClass.normalization
    return OpClass.elementwise


def flop_split(row: Row) -> dict[OpClass, int]:
    """A component's FLOPs by class: a product's matmul FLOPs are a contraction, what else it
    counts (the bias add) element-wise; any other component's FLOPs are its class's."""
    if row.flops_matmul:
        return {OpClass.contraction: row.flops_matmul, OpClass.elementwise: row.flops_other}
    return {op_class(row.key, False): row.flops}


@dataclass(frozen=True)
class ClassShare:
    """One class's FLOPs, bytes (unfused: every op reads its inputs and writes its output) and
    predicted time, with their shares of the whole."""

    op_class: OpClass
    components: int
    flops: int
    bytes: int
    time_s: float | None
    flop_share: float
    byte_share: float
    time_share: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"class": self.op_class.value, "components": self.components, "flops": self.flops,
                "bytes": self.bytes, "time_s": self.time_s, "flop_share": self.flop_share,
                "byte_share": self.byte_share, "time_share": self.time_share}


@dataclass(frozen=True)
class ClassShares:
    """A phase's components gathered into Ivanov et al.'s classes."""

    phase: str
    rows: tuple[ClassShare, ...]
    scope: str  # which components: "model", or "one layer"
    hardware: str | None = None
    kernels: str | None = None
    layers: int = 1  # the layers the sums span (``scope`` one layer: time_s is per layer)

    def __getitem__(self, c: OpClass) -> ClassShare:
        return next(r for r in self.rows if r.op_class is c)

    @property
    def time_s(self) -> float | None:
        times = [r.time_s for r in self.rows]
        return None if any(t is None for t in times) else sum(t for t in times if t is not None)

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "scope": self.scope, "hardware": self.hardware,
                "kernels": self.kernels, "time_s": self.time_s,
                "classes": [r.to_dict() for r in self.rows]}


def by_class(a: Analysis, prediction: Prediction | None = None, select: Callable[[Key], bool] | None = None,
             scope: str = "model", kernels: str | None = None, per: int = 1) -> ClassShares:
    """`a`'s components (those `select` keeps, by key) gathered by class, with `prediction`'s
    times (``runtime.timing.predict`` of the same analysis) when given. `per`: divide the counts
    and times by it (the layers, for one layer's figures; the shares do not change)."""
    rows = [r for r in a.rows if select is None or select(r.key)]
    flops = dict.fromkeys(OpClass, 0)
    nbytes = dict.fromkeys(OpClass, 0)
    count = dict.fromkeys(OpClass, 0)
    cls = {}
    for r in rows:
        c = cls[r.key] = op_class(r.key, bool(r.flops_matmul))
        for k, f in flop_split(r).items():
            flops[k] += f
        nbytes[c] += r.bytes_unfused
        count[c] += 1
    times: dict[OpClass, float] | None = None
    if prediction is not None:
        times = dict.fromkeys(OpClass, 0.0)
        for t in prediction.rows:
            if t.key in cls:
                times[cls[t.key]] += t.time_s
    total_f, total_b = sum(flops.values()), sum(nbytes.values())
    total_t = sum(times.values()) if times is not None else 0.0

    def share(x: float, total: float) -> float:
        return x / total if total else 0.0

    out = tuple(ClassShare(
        c, count[c], flops[c] // per, nbytes[c] // per, None if times is None else times[c] / per,
        share(flops[c], total_f), share(nbytes[c], total_b),
        None if times is None else share(times[c], total_t)) for c in OpClass)
    return ClassShares(a.phase, out, scope, prediction.hardware if prediction else None, kernels, per)


@dataclass(frozen=True)
class PaperShares:
    """A published row: a class's share of the FLOPs and of the time."""

    op_class: OpClass
    flop_share: float
    time_share: float


#: Ivanov et al. 2021 (arXiv:2007.00072), Table 1, "Proportions for operator classes in
#: PyTorch": BERT-large's encoder layer (B 8, L 512, N 1024, H 16, P 64, I 4096), a training
#: step (forward and backward) in PyTorch, mixed precision, on a V100 SXM2 (LLNL's Lassen).
IVANOV_2021 = (
    PaperShares(OpClass.contraction, 0.9980, 0.610),
    PaperShares(OpClass.normalization, 0.0017, 0.255),
    PaperShares(OpClass.elementwise, 0.0003, 0.135),
)
#: The same layer's measured time in PyTorch, forward and backward: 9.14 ms (spcl/substation,
#: README.md, "BERT-large, batch size 8, max sequence length 512 runtime", commit 2d93ff08f1bd).
IVANOV_PYTORCH_LAYER_S = 9.14e-3


def kernels_name(k: Any) -> str | None:
    """The ``--kernels`` name of a ``Kernels`` (None: a set no name gives)."""
    from costmodel.runtime.kernels import KERNELS

    return next((n for n, v in KERNELS.items() if v == k), None)


def phase_classes(a: Analysis) -> ClassShares:
    """The whole model's components by class in `a`'s phase; on a device (an
    ``on_device.DeviceAnalysis`` with hardware) with the predicted times under its kernels."""
    from costmodel.runtime.on_device import DeviceAnalysis
    from costmodel.runtime.timing import predict

    if not isinstance(a, DeviceAnalysis) or a.hardware is None:
        return by_class(a)
    k = a.assumed_kernels
    return by_class(a, predict(a, a.hardware, k), kernels=kernels_name(k))


def encoder_layer(batch: int = 8, seq: int = 512, hardware: str = "v100-sxm2",
                  kernels: str = "eager") -> ClassShares:
    """BERT-large's encoder layer, a training step in fp16 (mixed precision), as Ivanov et al.
    2021 ran it (Table 1: B 8, L 512): one layer's components (``Key.layer``), their sums over
    the 24 layers divided by 24."""
    from costmodel import catalog
    from costmodel.runtime.kernels import KERNELS
    from costmodel.runtime.on_device import analyze
    from costmodel.runtime.timing import predict

    spec = catalog.load("bert-large-uncased")
    k = KERNELS[kernels]
    a = analyze(spec, "train", batch=batch, seq=seq, dtype="fp16", hardware=hardware, kernels=k)
    assert a.hardware is not None and spec.n_layers is not None
    return by_class(a, predict(a, a.hardware, k), select=lambda key: key.layer, scope="one layer",
                    kernels=kernels, per=spec.n_layers)
