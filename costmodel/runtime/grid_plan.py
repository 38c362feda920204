"""A sweep's component tree built once per spec, phase and options, then evaluated per call:
what ``timing_grid.predict_grid`` needs of ``model.tree`` whatever the points.

``model.tree`` over numpy arrays of batch and seq (the tree of a sweep) runs its Python
(every component's formulas, a few hundred ``Cost`` fields) at every call, computes fields the
time rule never reads (``saved``, the fused bound's terms: about half the tree's arrays), builds
equal arrays twice (T5's encoder and decoder, S_e = S: 90 of its arrays a training call) and
leaves the merge (``grid_merge.merged``) to find them equal again by comparing their values.
Here the tree runs once over ``Node``s, placeholders for batch, seq and the encoder's seq that
record each operation on them (Python's operators, numpy's ufuncs and functions, and
``cost``'s bounds, through ``later``) as a node of a graph, one node per distinct operation on
the same operands (hash-consed: equal formulas are one node). A call evaluates, in the order
they were made, only the nodes the rule reads (``grid_merge.READ``, the products, the dropout
rows' bytes), each by the very operation the tree ran, on the call's arrays: the same floats as
the tree over arrays, without its Python; and the merge runs on the nodes (equal nodes, equal
arrays at every point) once per set of options and of the bounds' decisions (``Plan``), and is
kept: the components timed are those the tree over arrays times, key for key.

Nothing kept depends on the points: a plan is keyed by the spec (held), the phase, the width,
the latent-attention and routing conventions and whether the encoder's seq is the decoder's;
each call evaluates every node anew. The first call of a sweep builds the plan (the tree once,
as a call did, and a node per operation); bench/README.md ("seventh pass") gives its time. A
tree that reads a node's truth (an ``if`` on a size) raises ``NotPlanned``, and the sweep runs
the tree over arrays as before (``timing_grid``): no bundled spec does.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, cast

import numpy as np

from costmodel import model
from costmodel.components.key import Key, Role, SubBlock
from costmodel.cost import Cost, Dims
from costmodel.phases import Phase
from costmodel.runtime.grid_merge import Canonical, _values, merged, rule_traits
from costmodel.runtime.grid_values import _nonzero
from costmodel.runtime.timing import Kernels, dropout_parents
from costmodel.spec import Spec


class NotPlanned(TypeError):
    """The tree read a node's value (its truth, its size) while it was being planned."""


class Node:
    """An operation of the tree on the sweep's arrays, not run yet (``Plan``): `fn` applied to
    `args` (nodes and constants) and `kwargs`; a leaf (batch, seq, the encoder's seq) has no fn."""

    __slots__ = ("fn", "args", "kwargs", "index", "graph")

    def __init__(self, graph: Graph, fn: Callable[..., Any] | None, args: tuple[Any, ...],
                 kwargs: dict[str, Any], index: int) -> None:
        self.graph, self.fn, self.args, self.kwargs, self.index = graph, fn, args, kwargs, index

    # numpy's protocols: a ufunc or a numpy function of a node is a node
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method != "__call__" or "out" in kwargs:
            raise NotPlanned(f"{ufunc.__name__}.{method}")
        return self.graph.node(ufunc, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return self.graph.node(func, tuple(args), dict(kwargs))

    def later(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) once the nodes among them are arrays (``cost._bounded``: a min or max that
        reads its operands' values)."""
        node = self.graph.node(fn, args, {})
        self.graph.deciding.add(node.index)
        return node

    def __bool__(self) -> bool:
        raise NotPlanned("the truth of a size over the sweep")

    def __len__(self) -> int:
        raise NotPlanned("the length of a size over the sweep")

    __hash__ = object.__hash__  # (by identity: ``==`` below is an operation, as on arrays)

    def _op(self, fn: Callable[..., Any], other: Any) -> Any:
        return self.graph.node(fn, (self, other), {})

    def _rop(self, fn: Callable[..., Any], other: Any) -> Any:
        return self.graph.node(fn, (other, self), {})

    def __add__(self, o: Any) -> Any: return self._op(operator.add, o)
    def __radd__(self, o: Any) -> Any: return self._rop(operator.add, o)
    def __sub__(self, o: Any) -> Any: return self._op(operator.sub, o)
    def __rsub__(self, o: Any) -> Any: return self._rop(operator.sub, o)
    def __mul__(self, o: Any) -> Any: return self._op(operator.mul, o)
    def __rmul__(self, o: Any) -> Any: return self._rop(operator.mul, o)
    def __truediv__(self, o: Any) -> Any: return self._op(operator.truediv, o)
    def __rtruediv__(self, o: Any) -> Any: return self._rop(operator.truediv, o)
    def __floordiv__(self, o: Any) -> Any: return self._op(operator.floordiv, o)
    def __rfloordiv__(self, o: Any) -> Any: return self._rop(operator.floordiv, o)
    def __pow__(self, o: Any) -> Any: return self._op(operator.pow, o)
    def __rpow__(self, o: Any) -> Any: return self._rop(operator.pow, o)
    def __gt__(self, o: Any) -> Any: return self._op(operator.gt, o)
    def __ge__(self, o: Any) -> Any: return self._op(operator.ge, o)
    def __lt__(self, o: Any) -> Any: return self._op(operator.lt, o)
    def __le__(self, o: Any) -> Any: return self._op(operator.le, o)
    def __eq__(self, o: Any) -> Any: return self._op(operator.eq, o)
    def __ne__(self, o: Any) -> Any: return self._op(operator.ne, o)
    def __neg__(self) -> Any: return self.graph.node(operator.neg, (self,), {})


def _token(x: Any) -> Any:
    """What identifies an operand: a node by identity, a constant by type and value (a float by
    its repr: -0.0 is not 0.0), anything else by identity (never equal to another)."""
    kind = type(x)
    if kind is Node:
        return x
    if kind is float:
        return (float, repr(x))
    if kind in (int, bool, str) or x is None:
        return (kind, x)
    if kind is tuple:
        return (tuple, *map(_token, x))
    return (object, id(x))


#: Operations whose operands commute exactly, and their unit (x + 0 and x x 1 are x).
_COMMUTES: dict[Any, int] = {operator.add: 0, operator.mul: 1}


class Graph:
    """The nodes of one plan, in the order they were made (each after its operands), one per
    distinct (operation, operands, keywords)."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._made: dict[tuple[Any, ...], Node] = {}
        self._held: list[Any] = []  # operands identified by id: kept alive with the plan
        self.deciding: set[int] = set()  # nodes made by ``later``: their value may be an operand

    def leaf(self) -> Node:
        node = Node(self, None, (), {}, len(self.nodes))
        self.nodes.append(node)
        return node

    def node(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if fn in _COMMUTES and len(args) == 2 and not kwargs:
            a, b = args
            unit = _COMMUTES[fn]
            if type(b) is int and b == unit:  # x + 0, x * 1: x (the same values; no pass, one node)
                return a
            if type(a) is int and a == unit:
                return b
            if type(b) is Node and (type(a) is not Node or b.index < a.index):
                args = (b, a)  # one order for both (IEEE + and x commute exactly): one node
        elif fn is operator.sub and type(args[1]) is int and args[1] == 0:
            return args[0]
        key = (fn, *map(_token, args), *((k, _token(v)) for k, v in sorted(kwargs.items())))
        hit = self._made.get(key)
        if hit is None:
            self._held.append(args)
            hit = self._made[key] = Node(self, fn, args, kwargs, len(self.nodes))
            self.nodes.append(hit)
        return hit


def _nodes_in(values: Iterable[Any]) -> Iterable[Node]:
    for x in values:
        if type(x) is Node:
            yield x
        elif type(x) is tuple:
            yield from _nodes_in(x)


class Plan:
    """A sweep's tree over nodes (``costs``: key -> one layer's cost, each field a node or a
    number) and what a call evaluates of it: the nodes the rule reads, in order (``program``).

    A node made by ``later`` (a bound: min(C, w + S - 1) is C at every point of a prefill
    sweep) may take one of its operands as its value, so nodes unequal here may be equal
    arrays in a call. Which operand each took (``values``' decisions) says which: the merge is
    kept per set of decisions (``merge_keys``), and the components it joins are those whose
    values a call's tree over arrays would have found equal by identity."""

    def __init__(self, spec: Spec, graph: Graph, leaves: tuple[Node, Node, Node | None],
                 costs: dict[Key, Cost]) -> None:
        self.spec, self.graph, self.leaves, self.costs = spec, graph, leaves, costs
        wanted: set[int] = set()
        stack = [n for cost in costs.values() for n in _nodes_in(_read(cost))]
        while stack:  # the nodes read and their operands
            n = stack.pop()
            if n.index in wanted:
                continue
            wanted.add(n.index)
            stack.extend(_nodes_in(n.args))
            stack.extend(_nodes_in(n.kwargs.values()))
        # each step: (index, fn, operands as (True, index) or (False, constant), keywords)
        self.program: list[tuple[int, Callable[..., Any], tuple[tuple[bool, Any], ...], dict[str, Any]]] = [
            (n.index, n.fn, tuple((True, a.index) if type(a) is Node else (False, a) for a in n.args),
             n.kwargs) for n in graph.nodes if n.index in wanted and n.fn is not None]
        self.deciding = [(i, args) for i, fn, args, kw in self.program if i in graph.deciding]
        # (options, decisions) -> (key -> layers, the sets to compare by value: ``components``)
        self.merges: dict[tuple[Any, ...], tuple[dict[Key, int], list[list[Key]]]] = {}

    def values(self, batch: np.ndarray, seq: np.ndarray,
               enc: np.ndarray | None) -> tuple[list[Any], tuple[int, ...]]:
        """Every node read, evaluated on the call's arrays (by index; others None), and the
        decisions: the operand each ``later`` node took as its value (-1: a value of its own)."""
        v: list[Any] = [None] * len(self.graph.nodes)
        b, s, e = self.leaves
        v[b.index], v[s.index] = batch, seq
        if e is not None:
            v[e.index] = enc
        for index, fn, args, kwargs in self.program:
            if len(args) == 2 and not kwargs:  # (most steps: a binary operator)
                (na, a), (nb, b2) = args
                v[index] = fn(v[a] if na else a, v[b2] if nb else b2)
            else:
                got = [v[a] if node else a for node, a in args]
                v[index] = fn(*got, **kwargs)
        return v, tuple([_taken(v[i], [v[a] if node else a for node, a in args])
                         for i, args in self.deciding])

    def merge_keys(self, decisions: tuple[int, ...], v: list[Any]) -> dict[Key, Cost]:
        """Each cost with a token per field for ``grid_merge.merged``: a node's identity given
        the decisions (a ``later`` node that took an operand is that operand; the nodes made of
        equal operands are one), or its value where that is a number (numbers follow from the
        decisions, so the merge is kept by them)."""
        ids: dict[int, Any] = {n.index: ("leaf", n.index) for n in self.leaves if n is not None}
        made: dict[tuple[Any, ...], Any] = {}
        taken = dict(zip((i for i, _ in self.deciding), decisions, strict=True))
        for index, fn, args, kwargs in self.program:
            operands = [ids[a] if node else _token(a) for node, a in args]
            k = taken.get(index, -1)
            if k >= 0:
                ids[index] = operands[k]
                continue
            if fn in _COMMUTES and len(operands) == 2:
                operands.sort(key=repr)
            key = (fn, *operands, *((name, _token(x)) for name, x in sorted(kwargs.items())))
            ids[index] = made.setdefault(key, ("node", len(made)))

        def token(x: Any) -> Any:
            if type(x) is not Node:
                return x
            value = v[x.index]
            return ids[x.index] if type(value) is np.ndarray else value

        return {key: Cost(params=token(c.params), matmul=token(c.matmul), matmul_eff=token(c.matmul_eff),
                          other=token(c.other), bytes_unfused=token(c.bytes_unfused), train_only=c.train_only,
                          gemms=tuple([tuple(map(token, g)) for g in c.gemms]))
                for key, c in self.costs.items()}

    @staticmethod
    def at(x: Any, v: list[Any]) -> Any:
        """x's value: a node's in `v` (``values``), a number as it is."""
        return v[x.index] if type(x) is Node else x

    def concrete(self, cost: Cost, v: list[Any]) -> Cost:
        """`cost` with its nodes' values (the fields the rule reads; the others 0)."""
        def at(x: Any) -> Any:
            return v[x.index] if type(x) is Node else x

        return Cost(params=at(cost.params), matmul=at(cost.matmul), matmul_eff=at(cost.matmul_eff),
                    other=at(cost.other), bytes_unfused=at(cost.bytes_unfused), train_only=cost.train_only,
                    gemms=tuple([(at(c), at(m), at(k), at(n)) for c, m, k, n in cost.gemms]))


def _taken(value: Any, operands: list[Any]) -> int:
    """Which operand a bound's value is (-1: none), the operand itself or an array equal to it at
    every point (min(C, w + S - 1) is C's values in a new array: the tree over arrays merged its
    components by value, ``grid_merge.Canonical``); a bound reads a seq or batch axis, few points."""
    for k, x in enumerate(operands):
        if x is value:
            return k
    if type(value) is np.ndarray:
        for k, x in enumerate(operands):
            if type(x) is np.ndarray and x.shape == value.shape and bool((x == value).all()):
                return k
    return -1


def _read(cost: Cost) -> tuple[Any, ...]:
    """What the rule reads of a cost (``grid_merge.READ``) and its products."""
    return (cost.params, cost.matmul, cost.matmul_eff, cost.other, cost.bytes_unfused, cost.gemms)


#: (id of the spec, phase, p, mla, routing, the encoder's seq its own) -> (the spec, its plan, or
#: None where the tree could not be planned)
_PLANS: dict[tuple[Any, ...], tuple[Spec, Plan | None]] = {}


def plan(spec: Spec, ph: Phase, p: int, mla: str, routing: str, own_enc: bool) -> Plan | None:
    """The plan of `spec`'s tree in phase `ph` (kept), or None: the tree reads a size's value."""
    key = (id(spec), ph.name, p, mla, routing, own_enc)
    hit = _PLANS.get(key)
    if hit is None or hit[0] is not spec:
        if len(_PLANS) > 64:
            _PLANS.clear()
        hit = _PLANS[key] = (spec, _build(spec, ph, p, mla, routing, own_enc))
    return hit[1]


def _build(spec: Spec, ph: Phase, p: int, mla: str, routing: str, own_enc: bool) -> Plan | None:
    graph = Graph()
    batch, seq = graph.leaf(), graph.leaf()
    enc: Node | None = None
    if spec.is_encoder_decoder:
        enc = graph.leaf() if own_enc else seq
    try:
        # Phase.shape and numeric_dims are typed for ints; their arithmetic runs on nodes as well
        shape = ph.shape(cast(int, batch), cast(int, seq), cast(int, enc if enc is not None else 0))
        dims = model.numeric_dims(spec, shape, p, mla, routing)
        costs = _tree(spec, ph, dims)
    except NotPlanned:
        return None
    return Plan(spec, graph, (batch, seq, enc if own_enc else None), costs)


def _tree(spec: Spec, ph: Phase, dims: Dims) -> dict[Key, Cost]:
    """The tree of one layer of each kind (the rule multiplies by the layers; nothing else in the
    tree reads the layer counts), less what the phase does not run."""
    dims = replace(dims, layers=dict.fromkeys(dims.layers, 1))
    return {key: cost for key, cost in model.tree(spec, dims).items() if ph.training or not cost.train_only}


def components(spec: Spec, ph: Phase, p: int, mla: str, routing: str, batch: np.ndarray, seq: np.ndarray,
               enc: Any, kernels: Kernels, select: Callable[[Key], bool] | None,
               canonical: Canonical) -> tuple[set[SubBlock], dict[Key, tuple[Cost, int]]]:
    """What ``predict_grid`` times: the sub-blocks with a dropout row that moves bytes
    (``timing.dropout_parents``), and key -> (one layer's cost over the call's arrays, layers)
    of each set of components timed once (``grid_merge.merged``; `select` before the merge),
    off the spec's plan (``plan``), or off the tree over the arrays where it has none."""
    groups = model.layer_groups(spec)
    own_enc = type(enc) is np.ndarray and not (enc.shape == seq.shape and bool((enc == seq).all()))
    planned = plan(spec, ph, p, mla, routing, own_enc)
    if planned is None:  # the tree over the arrays, as it stands
        dims = model.numeric_dims(spec, ph.shape(cast(int, batch), cast(int, seq), cast(int, enc)), p, mla,
                                  routing)
        costs = _tree(spec, ph, dims)
        dropped = dropout_parents(((key, cost.bytes_unfused) for key, cost in costs.items()), _nonzero)
        if select is not None:  # before the merge: it joins components of different keys
            costs = {key: cost for key, cost in costs.items() if select(key)}
        return dropped, merged(costs, groups, kernels, dropped, ph.training, canonical)
    v, decisions = planned.values(batch, seq, enc if own_enc else None)
    dropped = dropout_parents(((key, planned.at(cost.bytes_unfused, v)) for key, cost in planned.costs.items()
                               if key.role is Role.dropout), _nonzero)
    options = (kernels, frozenset(dropped), ph.training, decisions)
    kept = planned.merges.get(options) if select is None else None
    if kept is None:  # on the nodes' tokens (``merge_keys``; kept without a `select`)
        tokens = planned.merge_keys(decisions, v)
        if select is not None:
            tokens = {k: c for k, c in tokens.items() if select(k)}
        together = merged(tokens, groups, kernels, dropped, ph.training)
        kept = ({k: layers for k, (_, layers) in together.items()},
                _alike(together, kernels, dropped, ph.training))
        if select is None:
            if len(planned.merges) > 64:  # (one per kernels, dropout and bounds' decisions met)
                planned.merges.clear()
            planned.merges[options] = kept
    timed = {key: (planned.concrete(planned.costs[key], v), layers) for key, layers in kept[0].items()}
    for alike in kept[1]:  # arrays of unequal formulas that may be equal (d x S x B, d x (B x S))
        heads: dict[tuple[Any, ...], Key] = {}
        for key in alike:
            head = heads.setdefault(_values(timed[key][0], canonical.of), key)
            if head is not key:
                cost, layers = timed[head]
                timed[head] = (cost, layers + timed.pop(key)[1])
    return dropped, timed


def _alike(together: dict[Key, tuple[Cost, int]], kernels: Kernels, dropped: set[SubBlock],
           training: bool) -> list[list[Key]]:
    """The sets of components the merge kept apart whose traits and numbers are equal and whose
    arrays come of unequal nodes: equal formulas in another order, or equal at every point of
    a sweep, which the tree over arrays merged by value (``grid_merge.Canonical``); a call
    compares them (a few, by value: the same merge as the tree over arrays)."""
    sets: dict[tuple[Any, ...], list[Key]] = {}
    for key, (cost, _) in together.items():
        fields = tuple(["array" if type(x) is tuple else x for x in _values(cost, lambda a: a)])
        sets.setdefault((rule_traits(key, kernels, dropped, training), fields), []).append(key)
    return [keys for keys in sets.values() if len(keys) > 1]
