"""`costmodel compare`, `ablate` and `elements`: parse, call the library, render."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Optional

import typer

from costmodel import catalog
from costmodel.cli.app import (
    BatchOpt,
    Dtype,
    DtypeOpt,
    EncSeqOpt,
    Format,
    FormatOpt,
    GroupSizeOpt,
    KvDtypeOpt,
    SeqOpt,
    SpecArg,
    WeightsDtypeOpt,
    _user_errors,
    app,
    emit,
)
from costmodel.precision import DEFAULT_GROUP, Widths
from costmodel.report import compare as compare_report
from costmodel.report.tables import records_csv
from costmodel.studies.compare import compare, expand
from costmodel.studies.conventions import ConventionName, selected
from costmodel.studies.variants import RANK_KEYS, ablate, elements_across, parse_sets, rank_elements

RankBy = Enum("RankBy", {k: k for k in RANK_KEYS}, type=str)  # type: ignore[misc]

ConventionOpt = Annotated[
    Optional[list[ConventionName]],
    typer.Option("--convention", metavar="PAPER",
                 help="Also count as these papers do (repeatable): kaplan, chinchilla, "
                 "megatron, palm, all; exact is ours, always shown."),
]


@app.command("compare")
def compare_cmd(
    specs: Annotated[list[str], typer.Argument(help="Spec files, bundled names, or folders of *.yaml.")],
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
    convention: ConventionOpt = None,
    weights_dtype: WeightsDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    group_size: GroupSizeOpt = DEFAULT_GROUP,
    fmt: FormatOpt = Format.table,
) -> None:
    """Architectures side by side, oldest first: every design choice (same or varying, shapes
    outside the rules of thumb flagged) and the costs at one common shape (prefill and decode at
    --weights-dtype and --kv-dtype where given)."""
    with _user_errors():
        c = compare(expand(specs), batch, seq, dtype.value, selected([n.value for n in convention or []]),
                    Widths(weights_dtype, kv_dtype, group_size))
    header = f"{len(c.specs)} models compared"
    emit(fmt, lambda: compare_report.comparison_tables(c), c.to_dict, header, page=True,
         csv=lambda: compare_report.comparison_csv(c))


@app.command("ablate")
def ablate_cmd(
    spec: SpecArg,
    set_: Annotated[list[str], typer.Option("--set", help="FIELD=VALUE (YAML scalar rules; repeatable). "
                                            "null removes a field: it takes its default again.")],
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    enc_seq: EncSeqOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
    weights_dtype: WeightsDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    group_size: GroupSizeOpt = DEFAULT_GROUP,
    fmt: FormatOpt = Format.table,
) -> None:
    """One spec before and after changing some of its fields: every quantity, every phase
    (prefill and decode at --weights-dtype and --kv-dtype where given)."""
    with _user_errors():
        a = ablate(catalog.load(spec), parse_sets(set_), batch, seq, dtype.value, enc_seq,
                   Widths(weights_dtype, kv_dtype, group_size))
    header = f"{a.before.name} with {', '.join(set_)}"
    emit(fmt, lambda: compare_report.ablation_tables(a), a.to_dict, header,
         csv=lambda: records_csv(a.to_dict()["deltas"]))


@app.command("elements")
def elements_cmd(
    specs: Annotated[list[str], typer.Argument(help="A spec (file or bundled name); several, or a folder, "
                                               "to rank the elements across them.")],
    batch: BatchOpt = 1,
    seq: SeqOpt = None,
    enc_seq: EncSeqOpt = None,
    dtype: DtypeOpt = Dtype.bf16,
    by: Annotated[RankBy, typer.Option("--by", metavar="KEY",
                                       help="Rank by params, train_flops, decode_bytes or kv_cache, "
                                       "or by the largest change of the four (max).")] = RankBy.max,  # type: ignore[attr-defined]
    window: Annotated[Optional[int], typer.Option("--window", min=1, help="Window of the sliding-window "
                      "swaps (a spec without one). Default: 1024, or half the context if shorter.")] = None,
    weights_dtype: WeightsDtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    group_size: GroupSizeOpt = DEFAULT_GROUP,
    fmt: FormatOpt = Format.table,
) -> None:
    """Swap each design element for each alternative in turn and rank the swaps by their effect
    on parameters, training FLOPs, decode bytes per token and KV cache."""
    with _user_errors():
        widths = Widths(weights_dtype, kv_dtype, group_size)
        widths.check()
        rankings = [rank_elements(s, batch, seq, dtype.value, by.value, window, enc_seq, widths)
                    for s in expand(specs)]
    if len(rankings) == 1:
        r = rankings[0]
        header = f"{r.spec.name}: which design elements matter"
        emit(fmt, lambda: compare_report.elements_tables(r), r.to_dict, header,
             csv=lambda: records_csv(_swap_records(r.to_dict())))
        return
    summaries = elements_across(rankings)
    data = {"elements": [s.to_dict() for s in summaries], "models": [r.to_dict() for r in rankings]}
    emit(fmt, lambda: [compare_report.across_table(summaries, rankings)], data,
         f"{len(rankings)} models: which design elements matter",
         csv=lambda: records_csv(data["elements"]))


def _swap_records(ranking: dict[str, Any]) -> list[dict[str, Any]]:
    """One CSV line per swap: the element, the swap, and its four quantities' changes."""
    return [{"spec": ranking["spec"], **{k: v for k, v in sw.items() if k != "changes"}}
            for sw in ranking["swaps"]]
