"""A sweep's tree planned once (``costmodel.runtime.grid_plan``): the plan's sweep is the tree
over arrays' (bitwise, with the same components timed once), a formula made twice is one node,
x + 0 and x x 1 are x, and a tree that reads a size's truth is not planned but still swept."""

from __future__ import annotations

import operator

import pytest

from costmodel import catalog
from costmodel.runtime.timing import Kernels
from tests.helpers import calibrated_profile

np = pytest.importorskip("numpy")
from costmodel.runtime import grid_plan, timing_grid  # noqa: E402  (numpy first)
from costmodel.runtime.timing_grid import predict_grid  # noqa: E402


def unplanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every sweep off the tree over arrays (no plan: ``grid_plan.plan`` answers None)."""
    monkeypatch.setattr(grid_plan, "plan", lambda *args: None)


def timed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys ``component_time`` is called with, recorded from now on."""
    keys: list[str] = []
    rule = timing_grid.component_time

    def record(spec, key, *args, **kwargs):  # type: ignore[no-untyped-def]
        keys.append(key.path)
        return rule(spec, key, *args, **kwargs)

    monkeypatch.setattr(timing_grid, "component_time", record)
    return keys


# T5 (encoder and decoder of one seq), gemma-3 (a window past every seq here: local and global
# attention's bounds decide alike), BERT (dropout bytes of unequal formulas, equal values),
# deepseek-v3 (MLA, MoE's expected experts: numpy functions of a node)
@pytest.mark.parametrize(("name", "phase"), [("t5-11b", "train"), ("gemma-3-27b", "prefill"),
                                             ("bert-base-uncased", "train"), ("deepseek-v3", "train"),
                                             ("t5-11b", "decode")])
def test_the_plan_sweeps_what_the_tree_over_arrays_does(monkeypatch: pytest.MonkeyPatch, name: str,
                                                          phase: str) -> None:
    spec, hw = catalog.load(name), calibrated_profile()
    batch, seq = np.array([[1.0, 3.0, 8.0]]), np.array([[64.0], [300.0], [500.0]])
    kernels = Kernels(fused_softmax=True)
    with monkeypatch.context() as m:
        unplanned(m)
        arrays = timed(m)
        want = predict_grid(spec, phase, batch, seq, hw, "bf16", kernels)
    planned = timed(monkeypatch)
    got = predict_grid(spec, phase, batch, seq, hw, "bf16", kernels)
    again = predict_grid(spec, phase, batch, seq, hw, "bf16", kernels)  # the merge kept
    assert grid_plan.plan(spec, timing_grid.PHASES[phase], 2, "naive", "uniform", False) is not None
    assert (got == want).all() and (again == want).all()
    assert planned == arrays + arrays  # the same components, timed once each, in the same order


def test_a_formula_made_twice_is_one_node() -> None:
    graph = grid_plan.Graph()
    b, s = graph.leaf(), graph.leaf()
    assert b * s is s * b and (b * s) * 2 is 2 * (s * b)
    assert s + 0 is s and 1 * s is s and s - 0 is s
    assert (s + 1) is not (s + 1.0) and (s * 0.0) is not (s * -0.0)  # constants by type and sign
    assert np.minimum(s, 4) is np.minimum(s, 4)
    assert (s - b) is not (b - s)
    node = (b * s) // 2
    assert node.fn is operator.floordiv and node.args[1] == 2


def test_a_tree_that_reads_a_sizes_truth_is_swept_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``if`` on a size stops the plan (``NotPlanned``): the sweep runs the tree over arrays."""
    graph = grid_plan.Graph()
    with pytest.raises(grid_plan.NotPlanned):
        bool(graph.leaf() > 1)
    spec, hw = catalog.load("llama-3-8b"), calibrated_profile()
    batch, seq = np.array([[1.0, 2.0]]), np.array([[64.0], [128.0]])
    want = predict_grid(spec, "train", batch, seq, hw, "bf16")
    tree = grid_plan.model.tree

    def reads(spec, dims):  # type: ignore[no-untyped-def]
        if dims.B:  # over arrays a truth test would fail too; over nodes it raises NotPlanned
            pass
        return tree(spec, dims)

    monkeypatch.setattr(grid_plan.model, "tree", lambda spec, dims: reads(spec, dims) if isinstance(
        dims.B, grid_plan.Node) else tree(spec, dims))
    monkeypatch.setattr(grid_plan, "_PLANS", {})
    assert grid_plan.plan(spec, timing_grid.PHASES["train"], 2, "naive", "uniform", False) is None
    assert (predict_grid(spec, "train", batch, seq, hw, "bf16") == want).all()
