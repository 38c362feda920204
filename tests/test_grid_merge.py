"""Components a sweep times once (``costmodel.runtime.grid_merge``): equal components join
across layers, sub-blocks and stacks, no layer is lost or counted twice, components the rule
treats differently stay apart, and a selection of components is made before they join."""

from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel import catalog, model
from costmodel.analysis import analyze
from costmodel.phases import PHASES
from costmodel.runtime.timing import Kernels, dropout_parents, layer_count, predict
from tests.helpers import calibrated_profile

np = pytest.importorskip("numpy")
from costmodel.runtime.grid_merge import merged, rule_traits  # noqa: E402  (numpy first)
from costmodel.runtime.timing_grid import predict_grid  # noqa: E402


def tree(name: str, phase: str, kernels: Kernels):
    """(costs per key, layer groups, dropout sub-blocks) of a 2 x 2 grid, as predict_grid builds them."""
    spec, ph = catalog.load(name), PHASES[phase]
    B, seq = np.array([[1.0, 3.0]]), np.array([[64.0], [300.0]])
    dims = model.numeric_dims(spec, ph.shape(B, seq, seq if spec.is_encoder_decoder else 0), 2)
    dims = replace(dims, layers=dict.fromkeys(dims.layers, 1))
    costs = {k: c for k, c in model.tree(spec, dims).items() if ph.training or not c.train_only}
    dropped = dropout_parents(((k, c.bytes_unfused) for k, c in costs.items()), lambda x: bool(np.any(x)))
    return spec, costs, model.layer_groups(spec), dropped


@pytest.mark.parametrize("kernels", [Kernels(), Kernels(fused_softmax=True, fused_bias_dropout_add=True)])
def test_t5s_decoder_joins_its_encoder_and_no_layer_is_lost(kernels) -> None:
    spec, costs, groups, dropped = tree("t5-11b", "train", kernels)
    out = merged(costs, groups, kernels, dropped, training=True)
    assert sum(n for _, n in out.values()) == sum(layer_count(groups, k) for k in costs)
    # In training S_e = S: the decoder's cross-attention projections cost what the encoder's do.
    cross_q = next(k for k in costs if k.block == "cross_attention" and k.leaf == "q")
    assert cross_q not in out
    assert len(out) < len(costs) // 2


def test_what_the_rule_treats_differently_stays_apart() -> None:
    """Under fused kernels a norm folds into its neighbour and the embedding lookup does not:
    equal bytes or not, their traits differ; the token table's gradients are its own."""
    kernels = Kernels(fused=True)
    spec, costs, groups, dropped = tree("llama-3-8b", "train", kernels)
    traits = {k.path: rule_traits(k, kernels, dropped, True) for k in costs}
    assert traits["layers/attention/norm"] != traits["embedding/tokens"]
    assert sum(t == traits["embedding/tokens"] for t in traits.values()) == 1
    out = merged(costs, groups, kernels, dropped, training=True)
    assert {k.path for k in out} >= {"embedding/tokens", "layers/attention/norm"}


def test_a_selection_is_made_before_components_join() -> None:
    """The decoder of T5 alone (``select``, as deploy splits a step) equals predict's decoder
    rows: had the selection come after the merge, the decoder's components timed under an
    encoder key would be lost."""
    spec, hw = catalog.load("t5-11b"), calibrated_profile()
    batch, seq = np.array([[2]]), np.array([[128]])
    grid = predict_grid(spec, "train", batch, seq, hw, select=lambda k: k.stack == "decoder")
    rows = predict(analyze(spec, "train", batch=2, seq=128), hw).rows
    want = sum(r.time_s for r in rows if r.key.stack == "decoder")
    assert 0 < want < sum(r.time_s for r in rows)
    assert grid[0, 0] == pytest.approx(want, rel=1e-12)


def test_costs_init_takes_every_field_with_its_default() -> None:
    """``Cost.__init__`` is written by hand (the frozen dataclass's own costs 3 us a Cost in
    the time grid's tree): its parameters are the fields, in order, with the fields' defaults,
    and an instance holds what it was given and stays frozen."""
    import dataclasses
    import inspect

    from costmodel.cost import Cost

    fields = dataclasses.fields(Cost)
    params = list(inspect.signature(Cost.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    assert [p.default for p in params] == [f.default for f in fields]
    values = {f.name: i + 1 for i, f in enumerate(fields)}
    cost = Cost(**values)
    assert {f.name: getattr(cost, f.name) for f in fields} == values
    assert dataclasses.replace(cost, saved=0) == Cost(**{**values, "saved": 0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cost.params = 0  # type: ignore[misc]
