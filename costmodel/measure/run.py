"""Run one phase of a spec's reference model and set each count beside its formula.

``measure(spec, phase, ...)`` builds ``reference.Transformer`` from the spec, runs the phase
once under the counters, and compares with ``costmodel.analyze`` for the same shape:

  params      sum of numel over the module's parameters            exact
  matmul      FlopCounterMode over the phase                       exact
  kv_cache    bytes of the cache tensors held after the pass       exact
  bytes       ByteCounter over the phase vs the unfused formula    convention gaps (docs)
  time        median of repeated runs vs the calibrated time        on a real device
              (``costmodel.runtime.timing``), the roofline lower bound beside it

The phase runs as ``costmodel.phases`` defines it: prefill is a forward over B x S tokens with
logits at every position, writing the cache; decode is one token per sequence with C - 1
tokens already cached (the cache is created directly, at its final size); train is forward,
loss (cross-entropy, z-loss, dropout as the spec says) and backward.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from costmodel import model as formulas
from costmodel.analysis import Analysis, analyze
from costmodel.devices.hardware import Hardware
from costmodel.measure import MeasureError
from costmodel.measure.blocks import KVCache
from costmodel.measure.counters import Counts, MetaShapes
from costmodel.measure.latent import set_convention
from costmodel.measure.malloc import allocator as kept
from costmodel.measure.malloc import check as check_allocator
from costmodel.measure.reference import Transformer, build
from costmodel.runtime.roofline import roofline
from costmodel.runtime.timing import predict
from costmodel.spec import LayerKind, Spec
from costmodel.studies.variants import variant

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DEVICES = ("meta", "cpu", "cuda")


@dataclass(frozen=True)
class FormulaCheck:
    """One quantity: what the formulas say, what the run did."""

    quantity: str
    formula: float
    measured: float
    exact: bool  # a count that must be equal (--check); otherwise a convention gap or a time
    unit: str  # "count", "FLOP", "B", "FLOP/B", "s"

    @property
    def error(self) -> float:
        """(measured - formula) / formula; 0 when both are 0."""
        if self.formula == 0:
            return 0.0 if self.measured == 0 else float("inf")
        return (self.measured - self.formula) / self.formula

    @property
    def agrees(self) -> bool:
        return not self.exact or self.formula == self.measured


@dataclass(frozen=True)
class ComponentCounts:
    """Formula and measured counts of one component (a module of the reference model)."""

    path: str
    params: tuple[int, int]
    flops_matmul: tuple[int, int]
    bytes: tuple[int, int]


@dataclass(frozen=True)
class Measurement:
    analysis: Analysis  # the formulas, for the same spec (after --layers) and shape
    device: str
    layers: int | None
    comparisons: tuple[FormulaCheck, ...]
    components: tuple[ComponentCounts, ...]
    hardware: str | None = None
    roofline: dict[str, Any] | None = None
    times_s: tuple[float, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Every exact count equals its formula."""
        return all(c.agrees for c in self.comparisons)

    def get(self, quantity: str) -> FormulaCheck:
        return next(c for c in self.comparisons if c.quantity == quantity)

    def to_dict(self) -> dict[str, Any]:
        a = self.analysis
        return {
            "spec": a.spec.name, "phase": a.phase, "batch": a.batch, "seq": a.seq,
            "enc_seq": a.enc_seq, "dtype": a.dtype, "device": self.device, "layers": self.layers,
            "shape": dict(a.shape), "ok": self.ok,
            "quantities": {c.quantity: {"formula": c.formula, "measured": c.measured,
                                        "error": c.error if c.formula else None, "exact": c.exact,
                                        "agrees": c.agrees, "unit": c.unit}
                           for c in self.comparisons},
            "hardware": self.hardware, "roofline": self.roofline, "times_s": list(self.times_s),
            "components": [{"path": r.path, **{q: {"formula": getattr(r, q)[0], "measured": getattr(r, q)[1]}
                                               for q in ("params", "flops_matmul", "bytes")}}
                           for r in self.components],
        }


# --- the spec, cut to fit -----------------------------------------------------------------------


def keep_layers(spec: Spec, n: int) -> Spec:
    """The spec with only its first `n` layers (per stack): a big model's block, timed on a
    small machine. A pattern cut short keeps the kinds those layers have."""
    if n < 1:
        raise MeasureError(f"layers: must be at least 1 (got {n})")
    changes: dict[str, Any] = {}
    if spec.is_encoder_decoder:
        changes["n_encoder_layers"] = min(n, spec.n_encoder_layers or n)
        changes["n_decoder_layers"] = min(n, spec.n_decoder_layers or n)
    else:
        changes["n_layers"] = min(n, spec.n_layers or n)
        kinds = spec.layer_kinds()[:n]
        changes["layer_pattern"] = [k.value for k in spec.layer_pattern[: len(kinds)]]
        if LayerKind.global_ not in kinds:
            changes["global_nope"] = None
        if LayerKind.local not in kinds:
            changes["window"] = None
        if LayerKind.chunked not in kinds:
            changes["attention_chunk"] = None
        moe = spec.moe
        if moe is not None:
            changes.update(_keep_sparse_layers(spec, n))
    return variant(spec, changes, name=spec.name)


def _keep_sparse_layers(spec: Spec, n: int) -> dict[str, Any]:
    """The FFN of the first `n` layers: the same mixture of experts, a dense FFN if none of
    them is sparse (DeepSeek's first 3), no dense width if all of them are."""
    moe = spec.moe
    assert moe is not None
    sparse = spec.sparse_layers()[:n]
    if not any(sparse):
        return {"ffn": {"kind": "dense", "activation": moe.activation.value, "d_ff": moe.d_ff}}
    data = moe.model_dump(mode="json", exclude_unset=True)
    if moe.moe_layers is not None:
        data["moe_layers"] = [i for i in moe.moe_layers if i < n]
    if all(sparse):
        data.pop("d_ff", None)
    return {"ffn": data}


# --- running a phase ------------------------------------------------------------------------


def phase_runner(model: Transformer, phase: str, shape: dict[str, int]) -> Callable[[], KVCache | None]:
    """A function that runs the phase once and returns the KV cache it leaves (None in train).

    Inputs and the cache are made here, outside what is counted and timed.
    """
    spec, device = model.spec, model.embedding.tokens.weight.device
    B, S, C, S_e, C_e = (shape[k] for k in ("B", "S", "C", "S_e", "C_e"))
    real = device.type != "meta"
    generator = torch.Generator(device="cpu").manual_seed(0)

    def ids(n: int) -> torch.Tensor:
        if not real:  # meta tensors have a shape and no data: nothing allocated on the host
            return torch.empty((B, n), dtype=torch.long, device=device)
        return torch.randint(0, spec.vocab_size, (B, n), generator=generator).to(device)

    tokens = ids(S)
    enc_tokens = ids(S_e) if spec.is_encoder_decoder and S_e > 0 else None

    if phase == "train":
        targets = ids(S)
        model.train()

        def step() -> None:
            model.zero_grad(set_to_none=True)
            model.loss(model(tokens, enc_tokens),
                       targets).backward()  # type: ignore[no-untyped-call]  # torch
        return step

    model.eval()
    # Decode: C - 1 tokens (and the C_e encoder tokens) are already cached.
    cache = model.new_cache(B, C, C_e, random=real and phase == "decode")

    def forward() -> KVCache:
        with torch.no_grad():
            model(tokens, enc_tokens, cache, start=C - S)
        return cache
    return forward


def time_runs(run: Callable[[], Any], device: torch.device, repeats: int, warmup: int) -> list[float]:
    """Seconds per run, `repeats` times after `warmup` untimed runs (CUDA events on a GPU)."""
    for _ in range(warmup):
        run()
    times = []
    cuda = device.type == "cuda"
    for _ in range(repeats):
        if cuda:
            # torch.cuda.Event's __init__ is unannotated
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()
            start.record()
            run()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
    return times


@contextlib.contextmanager
def out_of_memory(device: torch.device) -> Iterator[None]:
    """A model or a pass too big for the device ends in one line, not a traceback."""
    try:
        yield
    except (torch.OutOfMemoryError, RuntimeError) as e:
        if isinstance(e, torch.OutOfMemoryError) or "alloc" in str(e):
            raise MeasureError(
                f"device: out of memory on {device}; keep fewer layers (--layers N), or lower "
                "--batch or --seq (the meta device counts any size)"
            ) from None
        raise


def check_device(device: str) -> torch.device:
    kind = device.split(":")[0]
    if kind not in DEVICES:
        raise MeasureError(f"device: unknown device {device!r}; expected one of {', '.join(DEVICES)}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise MeasureError(f"device: CUDA is not available here (torch {torch.__version__})")
    return torch.device(device)


# --- measuring ----------------------------------------------------------------------------------


def measure(
    spec: Spec,
    phase: str = "prefill",
    batch: int = 1,
    seq: int | None = None,
    enc_seq: int | None = None,
    dtype: str = "bf16",
    device: str = "meta",
    layers: int | None = None,
    hardware: Hardware | None = None,
    repeats: int | None = None,
    warmup: int | None = None,
    count_bytes: bool = True,
    model: Transformer | None = None,
    mla: str = "naive",
    allocator: str | None = None,
) -> Measurement:
    """Run `phase` of `spec` on `device` and compare its counts (and, off the meta device, its
    time against `hardware`'s roofline) with the formulas.

    `layers` keeps the first N layers of each stack (the formulas use the same cut spec).
    On the meta device nothing is allocated: any size, counts only. `count_bytes=False` skips
    the byte counter (the slowest part) when only the exact counts are wanted. `model`, built
    by ``reference.build`` from the same spec, dtype and device, saves building it again.
    `mla` is the convention latent attention runs in, in the formulas and the model alike.
    `allocator` is how freed CPU memory is treated while timing (``costmodel.measure.malloc``);
    by default the one `hardware` was calibrated under, else ``cache``.
    """
    if layers is not None:
        spec = keep_layers(spec, layers)
    # The reference routes round robin: each sparse layer reads min(E, T*K) experts, the
    # formulas' worst case (costmodel.measure.moe).
    a = analyze(spec, phase, batch=batch, seq=seq, dtype=dtype, enc_seq=enc_seq, mla=mla, routing="worst")
    # torch sizes are C longs, in bytes too: the largest tensor (B x C x h x d_h scores' sides, the
    # logits, or the S x C scores themselves) at 8 bytes an element must fit one.
    context = max(a.shape["C"], a.shape["C_e"], 1)
    elements = a.shape["B"] * context * spec.n_heads * max(spec.head_dim, spec.vocab_size,
                                                          max(a.shape["S"], a.shape.get("S_e", 0), 1))
    if 8 * elements >= 2**63:
        raise MeasureError(f"seq: batch {a.shape['B']} x context {max(a.shape['C'], a.shape['C_e'])} makes "
                           "tensors past 2^63 elements, more than torch can index (even on meta)")
    if dtype not in TORCH_DTYPES:
        raise MeasureError(f"dtype: {dtype} cannot be measured; use one of {', '.join(TORCH_DTYPES)}")
    dev = check_device(device)
    with out_of_memory(dev):
        if model is None:
            model = build(spec, str(dev), TORCH_DTYPES[dtype])
        set_convention(model, mla)
        run = phase_runner(model, phase, a.shape)
        # MetaShapes inherits TorchDispatchMode's unannotated __init__
        meta = MetaShapes() if dev.type == "meta" else contextlib.nullcontext()  # type: ignore[no-untyped-call]
        with meta, Counts(count_bytes) as counts:
            cache = run()
    total = a.total()
    params = sum(p.numel() for p in model.parameters())
    kv = cache.nbytes if cache is not None else 0
    comparisons = [
        FormulaCheck("params", total.params, params, True, "count"),
        FormulaCheck("flops_matmul", total.flops_matmul, counts.total_flops, True, "FLOP"),
        FormulaCheck("kv_cache", total.kv_cache, kv, True, "B"),
    ]
    if count_bytes:
        comparisons.append(FormulaCheck("bytes_unfused", total.bytes_unfused, counts.total_bytes, False, "B"))
        comparisons.append(FormulaCheck(
            "intensity", total.flops_matmul / total.bytes_unfused,
            counts.total_flops / counts.total_bytes if counts.total_bytes else 0.0, False, "FLOP/B"))
    times: list[float] = []
    line = None
    calibrated_under = hardware.efficiency.allocator if hardware is not None and hardware.efficiency else None
    if allocator is not None:
        check_allocator(allocator)
    timed_under = None
    if dev.type != "meta":
        cuda = dev.type == "cuda"
        with out_of_memory(dev), kept(allocator or calibrated_under or "cache", dev.type) as timed_under:
            times = time_runs(run, dev, repeats or (10 if cuda else 3), 2 if warmup is None else warmup)
        measured = statistics.median(times)
        if hardware is not None:
            unfused = roofline(total.flops, total.bytes_unfused, hardware, dtype)
            fused = roofline(total.flops, total.bytes_fused, hardware, dtype)
            predicted = predict(a, hardware)
            line = {"compute_s": unfused.compute_s, "memory_s": unfused.memory_s,
                    "memory_fused_s": fused.memory_s, "time_s": unfused.time_s,
                    "time_fused_s": fused.time_s, "bound": unfused.bound, "ridge": unfused.ridge,
                    "predicted_s": predicted.time_s, "calibrated": predicted.calibrated,
                    "note": predicted.note, "allocator": timed_under,
                    "calibrated_allocator": calibrated_under}
            comparisons.append(FormulaCheck("time", predicted.time_s, measured, False, "s"))
            comparisons.append(FormulaCheck("time_roofline", unfused.time_s, measured, False, "s"))
        else:
            comparisons.append(FormulaCheck("time", 0.0, measured, False, "s"))
    return Measurement(
        analysis=a, device=str(dev), layers=layers, comparisons=tuple(comparisons),
        components=tuple(join(a, model, counts, count_bytes)),
        hardware=hardware.name if hardware is not None and times else None,
        roofline=line, times_s=tuple(times),
    )


# --- joining counts to components ---------------------------------------------------------


def component_namer(spec: Spec) -> Callable[[str], str]:
    """module name -> component path: ``decoder.layers.3.attention.q`` is
    ``layers[local]/attention/q`` (decoder-only, local/global pattern) or
    ``decoder/layers/attention/q`` (encoder-decoder); other list indices drop out."""
    grouped = {stack for (stack, kind) in formulas.layer_groups(spec) if kind is not None}
    groups = formulas.group_names(spec) if not spec.is_encoder_decoder else []

    def name(module: str) -> str:
        parts = module.split(".") if module else []
        if not spec.is_encoder_decoder and parts[:1] == ["decoder"]:
            parts = parts[1:]
        out: list[str] = []
        for part in parts:
            if part.isdigit():
                if out and out[-1] == "layers" and (out[:-1] or ["layers"])[-1] in grouped:
                    out[-1] = f"layers[{groups[int(part)]}]"
                continue
            out.append(part)
        return "/".join(out)
    return name


def _tracked(name: str) -> str:
    """A ModuleTracker name ('Global', 'Transformer', 'Transformer.decoder...') -> module name."""
    return name.partition(".")[2] if "." in name else ""


def join(a: Analysis, model: Transformer, counts: Counts, with_bytes: bool) -> list[ComponentCounts]:
    """Formula rows and measured counts summed onto the deepest paths both sides know.

    A formula leaf with no module of its own (``attention/scores``) and an op outside any
    named sub-module both roll up to their nearest common ancestor (``attention``).
    """
    path_of = component_namer(a.spec)
    measured: dict[str, list[int]] = {}

    def add(path: str, i: int, value: int) -> None:
        measured.setdefault(path, [0, 0, 0])[i] += value

    for name, p in model.named_parameters():
        add(path_of(name.rpartition(".")[0]), 0, p.numel())
    for name, flops in counts.flops_by_module().items():
        add(path_of(_tracked(name)), 1, flops)
    for name, nbytes in counts.bytes_by_module().items():
        add(path_of(_tracked(name)), 2, nbytes)
    formula = {r.path: (r.params, r.flops_matmul, r.bytes_unfused) for r in a.rows}

    shared = _prefixes(formula) & _prefixes(measured)

    def key(path: str) -> str:
        return next(p for p in _prefixes_of(path) if p in shared)

    sums: dict[str, list[int]] = {}
    for side, table in ((0, formula), (1, measured)):
        for path, values in table.items():
            row = sums.setdefault(key(path), [0] * 6)
            for i, v in enumerate(values):
                row[2 * i + side] += v
    rows = []
    for path in sorted(sums, key=_order(formula)):
        r = sums[path]
        if not with_bytes:
            r[4] = r[5] = 0
        rows.append(ComponentCounts(path or "(model)", (r[0], r[1]), (r[2], r[3]), (r[4], r[5])))
    return rows


def _prefixes_of(path: str) -> list[str]:
    """'a/b/c' -> ['a/b/c', 'a/b', 'a', ''], deepest first."""
    parts = path.split("/") if path else []
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def _prefixes(paths: Iterable[str]) -> set[str]:
    return {p for path in paths for p in _prefixes_of(path)}


def _order(formula: dict[str, Any]) -> Callable[[str], tuple[int, str]]:
    """Components in the order the formula tree lists them."""
    first: dict[str, int] = {}
    for i, path in enumerate(formula):
        for p in _prefixes_of(path):
            first.setdefault(p, i)
    return lambda p: (first.get(p, len(first)), p)
