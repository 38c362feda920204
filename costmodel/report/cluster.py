"""The cluster in `costmodel report` and in `train --plot` / `plan --plot`: one training step as a
waterfall (compute by component, each collective's exposed time, the pipeline bubble, the
optimizer step, ending at the step time), and the plan's layouts as points of memory per GPU
against step time.

Built from the parallel model's own objects (``parallel.step.Step``: its ``breakdown``,
``compute_by_component`` and ``collectives`` with the ``parts`` they are exposed under;
``parallel.plan.Plan``); nothing is computed here but sums and labels. docs/report.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from costmodel import units
from costmodel.analysis import default_seq
from costmodel.parallel.cluster import Cluster, load_cluster
from costmodel.parallel.collectives import Collective
from costmodel.parallel.layout import Layout, LayoutError, check
from costmodel.parallel.plan import Plan, plan
from costmodel.parallel.step import Step, StepModel
from costmodel.report import svg
from costmodel.report.section import Cell, Section
from costmodel.report.tables import kernel_notes
from costmodel.spec import Spec

#: The waterfall's colours, in legend order.
GROUPS = ("compute", "communication (exposed)", "pipeline bubble", "optimizer step")
KINDS = {"all_reduce": "all-reduce", "reduce_scatter": "reduce-scatter", "all_gather": "all-gather",
         "all_to_all": "all-to-all", "p2p": "send"}
#: The parallel group a collective runs over, as a reader names it.
RUNS_OVER = {"tp": "TP", "cp": "CP ring", "ep": "EP", "pp": "PP", "dp": "DP", "edp": "expert DP"}
#: Points drawn at most on the layouts chart (each a <circle> of about 250 bytes: the page stays
#: small); a fifth of them kept for layouts that do not fit, where there are that many.
MOST_POINTS = 1000
GIB = 2 ** 30


@dataclass(frozen=True)
class Part:
    """One bar of the waterfall: `seconds` on the step's critical path (they add up to
    ``Step.step_time_s``), and `overlapped` seconds that ran beside compute (off the path)."""

    name: str
    group: str  # one of GROUPS
    seconds: float
    overlapped: float = 0.0


def _collective_name(part: str, c: Collective) -> str:
    if part == "embedding_sync":
        return "tied-embedding all-reduce"
    if part == "pp_comm" and c.group == "tp":  # the receiving TP ranks gather the pipeline's pieces
        return "PP receive all-gather (TP)"
    return f"{RUNS_OVER.get(c.group, c.group)} {KINDS.get(c.kind, c.kind)}"


def step_parts(step: Step) -> list[Part]:
    """The step's parts in ``Step.breakdown``'s order: compute by component (slowest first, as
    `train` lists them), then each breakdown part's collectives by group and kind, the bubble
    and the optimizer step. Parts with no time, exposed or overlapped, are left out."""
    out = [Part(cat, GROUPS[0], sec) for cat, sec in
           sorted(step.compute_by_component.items(), key=lambda kv: -kv[1]) if sec]
    for key, sec in step.breakdown.items():
        if key == "compute":
            continue
        if key == "pipeline_bubble":
            out.append(Part("pipeline bubble", GROUPS[2], sec))
        elif key == "optimizer":
            out.append(Part("optimizer step", GROUPS[3], sec))
        else:
            named: dict[str, list[float]] = {}
            for (c, calls, exposed), part in zip(step.collectives, step.parts, strict=True):
                if part == key:
                    e = named.setdefault(_collective_name(part, c), [0.0, 0.0])
                    e[0] += exposed
                    e[1] += calls * c.time_s
            out += [Part(name, GROUPS[1], exposed, max(0.0, whole - exposed))
                    for name, (exposed, whole) in named.items()]
    return [p for p in out if p.seconds > 0 or p.overlapped > 0]


def waterfall_section(step: Step) -> Section:
    """One training step as a waterfall, the same parts as a table (time, share, overlapped)."""
    parts = step_parts(step)
    lo, cl = step.layout, step.cluster
    title = f"{step.spec.name}, {lo.label()} on {lo.gpus} x {cl.hardware.name}"
    title = f"One training step: {title}" if len(title) < 80 else title  # within the chart's width
    chart = svg.waterfall(title, [p.name for p in parts], [p.seconds for p in parts],
                          [GROUPS.index(p.group) for p in parts], GROUPS, units.seconds,
                          "time per step (s; the critical path of the slowest pipeline stage)",
                          total=f"step: {units.seconds(step.step_time_s)}",
                          hidden=[p.overlapped for p in parts],
                          hidden_name="overlapped (beside compute, off the path)")
    rows: list[tuple[Cell, ...]] = []
    start = 0.0
    for p in parts:
        rows.append((p.name, p.group, start, p.seconds, p.seconds / step.step_time_s, p.overlapped))
        start += p.seconds
    fit = "fits" if step.fits else "DOES NOT FIT"
    notes = (f"{cl.name}, global batch {lo.global_batch} x {step.seq} tokens, {step.dtype}; step "
             f"{units.seconds(step.step_time_s)}, MFU {100 * step.mfu:.1f}%; memory per GPU "
             f"{units.nbytes(step.per_gpu.total)} of {units.decimal_bytes(cl.hardware.memory_bytes)}: {fit}",
             "the parallel model (costmodel train, docs/parallel.md): the pacing pipeline stage's compute "
             "by component, each collective's exposed time by group and kind, the pipeline bubble and the "
             "optimizer step add up to the step time; overlapped: a collective's time hidden behind "
             "compute (not in the sum)",
             *step.notes, *kernel_notes([step]))
    return Section("cluster-step", f"One training step on {cl.name}: where the time goes", chart,
                   ("part", "kind", "starts at", "time", "share of step", "overlapped"), rows, notes,
                   fmt=("", "", "s", "s", "share", "s"))


def front(steps: Sequence[Step]) -> tuple[Step, ...]:
    """The layouts no other beats in both memory per GPU and step time (the Pareto front), least
    memory first: the fastest layout for each memory budget."""
    out: list[Step] = []
    for s in sorted(steps, key=lambda s: (s.per_gpu.total, s.step_time_s)):
        if not out or s.step_time_s < out[-1].step_time_s:
            out.append(s)
    return tuple(out)


def shown_layouts(result: Plan, most: int = MOST_POINTS) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    """The layouts the chart draws, at most `most`: of those that fit, the front (``front``), the
    fastest and then every k-th of the rest of the ranking (the whole spread of step times); a
    fifth of `most` (or all that is left when few fit) of those that do not, least memory per GPU
    first: the ones beside the device's line. Each list in the plan's order."""
    n_unfit = min(len(result.unfit), most // 5)
    n_fit = min(len(result.ranked), most - n_unfit)
    n_unfit = min(len(result.unfit), most - n_fit)
    ranked = result.ranked
    edge = front(ranked)
    if len(edge) > n_fit:  # a front longer than the room: every k-th of it, the best always
        edge = tuple(edge[round(i * (len(edge) - 1) / max(n_fit - 1, 1))] for i in range(n_fit))
    keep = set(map(id, edge)) | set(map(id, ranked[:1]))
    fastest = max(0, n_fit // 2 - len(keep))
    keep |= set(map(id, ranked[:fastest]))
    rest = [s for s in ranked[fastest:] if id(s) not in keep]
    room = max(0, n_fit - len(keep))
    if rest and room:
        keep |= {id(rest[round(i * (len(rest) - 1) / max(room - 1, 1))]) for i in range(min(room, len(rest)))}
    return tuple(s for s in ranked if id(s) in keep), result.unfit[:n_unfit]


def layouts_section(result: Plan, top: int = 10, most: int = MOST_POINTS) -> Section:
    """The plan's layouts as points (memory per GPU, step time), coloured by whether they fit,
    the front of the fastest for their memory as a line, the device's memory a named line, the
    best layout called out; the table is `plan`'s top rows."""
    fit, unfit = shown_layouts(result, most)
    first = (result.ranked or result.unfit)[0]
    spec, cl, hw = first.spec.name, first.cluster, first.cluster.hardware
    lo = first.layout
    edge = front(fit)
    on_edge = set(map(id, edge))
    others = [s for s in fit if id(s) not in on_edge]

    def points(steps: Sequence[Step]) -> list[tuple[float, float]]:
        return [(s.per_gpu.total / GIB, s.step_time_s) for s in steps]

    def labels(steps: Sequence[Step]) -> list[str]:
        return [s.layout.label() for s in steps]

    # Fixed colours (fits, does not fit, the front); an empty series goes unnamed, out of the legend.
    series = [svg.Series("fits" if others else "", points(others), labels=labels(others)),
              svg.Series("does not fit" if unfit else "", points(unfit), labels=labels(unfit)),
              svg.Series("fastest for its memory" if edge else "", points(edge), line=True,
                         labels=labels(edge))]
    best = fit[:1]
    chart = svg.xy(f"Layouts of {spec} on {lo.gpus} x {hw.name}, global batch {lo.global_batch}: "
                   "step time vs memory", series,
                   svg.Axis("memory per GPU (GiB, the fullest pipeline stage)", log=False,
                            fmt=lambda v: f"{v:.3g}"),
                   svg.Axis("step time (s, log)", "s"),
                   x_limits=[(f"{hw.name}: {units.decimal_bytes(hw.memory_bytes)} = "
                              f"{hw.memory_bytes / GIB:.3g} GiB", hw.memory_bytes / GIB)],
                   callouts=[(f"best: {s.layout.label()}, {units.seconds(s.step_time_s)}",
                              s.per_gpu.total / GIB, s.step_time_s) for s in best])
    listed = result.ranked[:top] if result.ranked else result.unfit[:top]
    rows: list[tuple[Cell, ...]] = []
    for i, s in enumerate(listed, 1):
        b = s.breakdown
        rows.append((str(i), s.layout.label(), s.step_time_s, s.mfu, s.tokens_per_s, s.per_gpu.total,
                     b["pipeline_bubble"], b["tp_comm"] + b["dp_comm"] + b["pp_comm"]))
    drawn = (f"drawn: {len(fit) + len(unfit):,} points, at most {most:,} (the page stays small): "
             f"{len(fit):,} of the {len(result.ranked):,} that fit (the {len(edge)} fastest for their "
             "memory, the fastest, then evenly spaced down the ranking to the slowest) and the "
             f"{len(unfit):,} of the {len(result.unfit):,} that do not with the least memory per GPU")
    notes = (f"{result.considered:,} valid layouts of {spec} on {lo.gpus} GPUs of {cl.name}: "
             f"{len(result.ranked):,} fit, {result.dropped:,} do not"
             + ("" if result.ranked else " (none fits: the table lists those with the least memory)"),
             drawn,
             "y: the step time, by which plan ranks (log: the slow layouts are several times the best); "
             "for one plan MFU is a constant divided by it (the same model FLOPs and GPUs), so an MFU "
             "axis would only mirror it; x: the fullest "
             "pipeline stage's GPU, weights, gradients, optimizer states and activations",
             "comm: exposed tensor-, data-parallel and pipeline communication, as plan prints it",
             *kernel_notes(listed))
    return Section("cluster-layouts", f"Layouts on {cl.name}: step time against memory per GPU", chart,
                   ("#", "layout", "step", "MFU", "tokens/s", "memory/GPU", "bubble", "comm"), rows, notes,
                   fmt=("", "", "s", "share", "count", "bytes", "s", "s"))


#: The dtypes a training step runs in (``costmodel train --dtype``).
TRAIN_DTYPES = ("bf16", "fp16", "fp8")


@dataclass(frozen=True)
class OnCluster:
    """What `costmodel report --cluster` adds: the plan of every layout (those that do not fit
    kept) and the step the waterfall draws (the layout asked for, else the plan's best; None when
    none is asked for and none fits)."""

    cluster: Cluster
    step: Step | None
    plan: Plan
    gpus: int

    def sections(self, top: int = 10) -> list[Section]:
        return sections(self.step, self.plan, top)

    def why(self) -> str:
        """Why it cannot run, when it cannot: the step does not fit, or no layout does."""
        device = units.decimal_bytes(self.cluster.hardware.memory_bytes)
        if self.step is not None:
            return (f"{self.step.layout.label()} does not fit: "
                    f"{units.decimal_bytes(self.step.per_gpu.total)} a GPU on {device} GPUs")
        return (f"no layout fits on {self.gpus} GPUs of {self.cluster.name} ({self.plan.considered} valid, "
                f"all over {device})" if self.plan.considered else
                f"no valid layout on {self.gpus} GPUs (the GPUs, heads, layers and batch divide into none)")


def on_cluster(spec: Spec, cluster: str, gpus: int, global_batch: int, seq: int | None = None,
               dtype: str = "bf16", tp: int | None = None, pp: int | None = None,
               micro_batch: int = 1) -> OnCluster:
    """The report's cluster part, `train`'s and `plan`'s defaults otherwise (no engine, flash,
    the Megatron recipe): `tp` or `pp` given, that layout with DP = N / (TP x PP); else the plan's
    best. Bad input (a dtype no step runs in, a layout that cannot run) raises in one line."""
    if dtype not in TRAIN_DTYPES:
        raise LayoutError(f"--dtype: a training step runs in {', '.join(TRAIN_DTYPES)} (got {dtype})")
    if gpus < 1 or global_batch < 1:
        raise LayoutError(f"--gpus and --global-batch: must be at least 1 (got {gpus}, {global_batch})")
    cl = load_cluster(cluster)
    model = StepModel(spec, cl, seq if seq is not None else default_seq(spec, "train"), dtype)
    layout = None
    if tp is not None or pp is not None:
        t, p = tp or 1, pp or 1
        if t < 1 or p < 1 or gpus % (t * p):
            check(Layout(global_batch, micro_batch, t, p, 1), spec)  # the spec's limits name the option first
            raise LayoutError(f"--gpus: {gpus} GPUs are not a multiple of TP {t} x PP {p} = {t * p}")
        layout = Layout(global_batch, micro_batch, t, p, gpus // (t * p))
    step, result = search(model, gpus, global_batch, layout)
    return OnCluster(cl, step, result, gpus)


def search(model: StepModel, gpus: int, global_batch: int, layout: Layout | None = None,
           **space: Any) -> tuple[Step | None, Plan]:
    """The plan of every layout (those that do not fit kept for the chart) and the step the
    waterfall draws: `layout`'s (checked), else the plan's best; None when none is given and none
    fits."""
    if layout is not None:
        check(layout, model.spec, gpus, model.seq)
    result = plan(model, gpus, global_batch, unfit=True, **space)
    step = model.step(layout) if layout is not None else result.best()
    return step, result


def sections(step: Step | None, result: Plan, top: int = 10) -> list[Section]:
    """The report's cluster sections: the step's waterfall (when there is a step) and the layouts."""
    return ([waterfall_section(step)] if step is not None else []) + (
        [layouts_section(result, top)] if result.ranked or result.unfit else [])
