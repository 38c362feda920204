"""The calibrated time model over many shapes at once (numpy): ``costmodel.runtime.timing`` vectorised.

``predict_grid`` applies ``timing.component_time``, the rule ``predict`` applies, to numpy
arrays of batch and sequence length. The component tree is evaluated with array-valued B
and S (the formulas are the same code: ``cost.smin``/``smax``/``half`` take arrays; a quantity
that depends on one axis keeps that axis's size; sizes are float64), for one layer of each kind,
off a plan of it built once per spec and phase (``grid_plan``: each formula a node, a call
evaluates the nodes the rule reads, the same floats as the tree over the arrays);
the rule is given the layers a component spans (components that cost the same per layer and
that the rule treats alike, an FFN beside local and global attention, Llama's k and v, T5's
encoder and decoder projections, are timed once over all their layers: the time is linear in
the layers; ``grid_merge``). ``GridRates`` does the table lookups on arrays:

- a product with one array among M, N, K (every linear: M = T forward and in dA, K = T in dB)
  reads the matmul table reduced to a curve over that axis, one ``np.interp`` in log space (the
  lookup is multilinear in log M, log N, log K, so fixing two axes first gives the same
  values; the number axes are read at their two grid points, ``grid_lookup.at_numbers``); two
  or three array axes are interpolated separably, the axes of one shape together and the
  (seq, 1) ones first (``grid_lookup.interpolate_at``); above the curve's last grid point
  (calibrate's M up to 1024, K up to 4096; a measured GPU table's M up to 32,768) the value
  is a number, so the interpolation and exp run only at the points below (``_exp_interp``);
- each distinct lookup runs once per call (``GridRates._lookup``, keyed by a token per set of
  equal arrays, ``grid_merge.Canonical``, which the merge shares): a layer's linears share one
  T array, a weight's forward and backward products the same shapes in another order, two
  norms the same bytes; a ``FlopsTable`` (datasheet profiles) depends on 2MNK alone, so a
  linear's three products share one lookup; a step table of a few sizes is a few comparisons;
  an array (1,024 points or more) that is a number times one logged before (most bytes are a
  number times T, or a number per seq times T) gets its log as that log plus the number's
  (``grid_logs.Logs``, to 1e-15);
- a product's byte floor (``Rates.at_least_memory``) reads the memory table only where the
  bytes at the table's least efficiency could exceed the product's time;
- a size table whose time already rises with the size (``time_rises``) is read as it stands;
  another log-log memory table on its envelope, itself a log-log table built once per profile
  (``grid_lookup.log_envelope_table``: one interpolation and exp); a step table (Calculon's) on
  its time envelope with the step's own index (``_size_efficiency``, ``_memory_steps``); a
  shape table's envelope is in its grid (``MatmulTable.envelope``);
- the physics floor (``GridRates.roof``, ``at_least``) is written into arrays made for it,
  in place, and a component with no FLOPs of its own makes no pass for them;
- a weight's three products (forward, dA, dB: 2MKN FLOPs each) share one multiply by their
  FLOPs (``GridRates.gemms``: FLOPs x the sum of their seconds per FLOP), and on a shape table
  the forward and dA curves over T are read as one stacked pair (``_weight``); the tables are
  kept as logs of seconds per FLOP or per byte, so a lookup is an interpolation and an exp.

What costs time at 10,000 points is the number of passes over the arrays (each allocates and
writes 80 KB) and Python per component, so the code avoids passes that change nothing (adding
0.0, multiplying by 1, a maximum with a floor below every point) and keeps two kinds of array
unspread: a per-pass quantity over a component's layers as ``grid_merge.Scaled`` (``roof``
folds passes x layers into its division), a table read past its top at most points as
``grid_lookup.Partial`` (the constant and the few values below, added and multiplied as such);
the tree builds what layer groups share once (``model._layer``). Lookups are not stacked
across components: a (15, 100, 100) memory lookup took 1.6x the time of 15 separate ones (the
arrays leave the cache), bench/README.md's fourth pass; its fifth (B) counts the passes.

A program that sweeps at scale should first ask glibc to keep freed heap
(``costmodel.measure.malloc.keep_freed_heap``: without it each of a call's hundreds of arrays
is faulted in anew, about 1.4x at 10,000 points); ``predict_grid`` does not (a library does
not change its host's allocator behind its back), bench/time_sweep_speed.py does.

The times equal ``predict``'s to 1e-12 (tests/test_timing_grid.py: every bundled spec, phase and
kernel option); the speed is bench/time_sweep_speed.py's. numpy is imported here, not by analyze.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from costmodel.components.key import Key
from costmodel.devices.efficiency import (
    Efficiency,
    FlopsTable,
    MatmulTable,
    _lookup,
    _raw,
)
from costmodel.devices.hardware import Hardware
from costmodel.phases import PHASES
from costmodel.runtime.fused_attention import AttentionKernel, fused_core, grid_times, mla_bmm_read
from costmodel.runtime.fused_moe import experts_share, moe_read
from costmodel.runtime.grid_blocks import in_blocks
from costmodel.runtime.grid_logs import Logs
from costmodel.runtime.grid_lookup import (
    Partial,
    above,
    at_numbers,
    exponent_steps,
    interpolate_at,
    positions,
    prepared,
    step,
    step_at,
    steps_of,
    table_arrays,
)
from costmodel.runtime.grid_merge import Canonical, Whole
from costmodel.runtime.grid_plan import components
from costmodel.runtime.grid_values import (  # noqa: F401  (_per: tests/test_timing_grid.py)
    _array,
    _below,
    _nonzero,
    _number,
    _per,
    _positive,
    _product,
    _sum,
)
from costmodel.runtime.timing import (
    Kernels,
    component_time,
    first_touch_s,
    gemm_time,
)
from costmodel.spec import Spec
from costmodel.symbols import DTYPE_BYTES

_PLAIN = {int, float, np.ndarray}  # (``_number`` returns these as they are: predict_grid makes no 0-d arrays)
_MISSING = object()  # a lookup not made yet (None is a value: ``_exp_interp``'s "everywhere")


class GridRates:
    """``timing.Rates`` over numpy arrays, looking each distinct shape up once per instance."""

    def __init__(self, eff: Efficiency, peak: float, bandwidth: float, dtype: str,
                 attention: AttentionKernel | None = None) -> None:
        self.eff, self.peak, self.bandwidth, self.floor_s = eff, peak, bandwidth, eff.floor_s
        self.table, self.dtype = eff.matmul[dtype], dtype
        self.attention = attention
        c = self._profile = prepared(eff, peak, bandwidth, dtype)
        self._log_table, self._grids, self._axes = c.log_table, c.grids, c.axes
        self._least_memory, self._memory_log, self._fresh_from = c.least_memory, c.memory_log, c.fresh_from
        self._memo: dict[tuple[Any, ...], Any] = {}
        self.canonical = Canonical()  # (shared with the merge: ``grid_merge.merged``)
        self._canonical = self.canonical.of
        self._logs = Logs()  # (the arrays logged at full size: later logs read theirs)
        # a weight's three products read as one (``_weight``): a table over M and K
        self._stacks = isinstance(self.table, MatmulTable) and len(self.table.M) > 1 and len(self.table.K) > 1

    # --- Rates --------------------------------------------------------------------------------

    def gemm(self, count: Any, M: Any, K: Any, N: Any, launches: int = 0) -> Any:
        count, M, K, N = (_number(x) for x in (count, M, K, N))
        if not any(_array(x) for x in (count, M, K, N)):
            return gemm_time(count, M, K, N, self.peak, self.table, launches)
        return self.gemms([(count, M, K, N)], launches)

    def fused_attention(self, spec: Spec, key: Key, scores: tuple[Any, Any, Any, Any], layers: int,
                        ratio: Any) -> Any:
        count, M, K, N = (_number(x) for x in scores)
        core = fused_core(self.attention, spec, key, (count, M, K, N), layers, _number(ratio))
        if core is None:
            return None
        if not any(_array(x) for x in core.coords):
            return core.grid(*core.coords).time_s * core.factor
        return grid_times(core.grid, *core.coords) * core.factor

    def moe(self, spec: Spec, key: Key, gemms: tuple[tuple[Any, Any, Any, Any], ...], layers: int) -> Any:
        read = moe_read(self.attention, spec, key, self.dtype)
        if read is None:
            return None
        share = experts_share(read, key, tuple(tuple(_number(x) for x in g) for g in gemms), layers)
        if share is None:
            return 0.0
        tokens, factor = share
        if not _array(tokens):
            return read.grid(tokens).time_s * factor
        return grid_times(read.grid, tokens) * factor

    def mla_bmm(self, spec: Spec, key: Key, gemms: tuple[tuple[Any, Any, Any, Any], ...], layers: int) -> Any:
        numbers = tuple(tuple(_number(x) for x in g) for g in gemms)
        read = mla_bmm_read(self.attention, spec, key, numbers, self.dtype)
        return None if read is None else read.times(read.tokens(numbers, layers), layers)

    def gemms(self, products: list[tuple[Any, Any, Any, Any]], launches: int) -> Any:
        # Products of one size (a weight's forward product and its two backward ones, 2MKN
        # FLOPs each) share one multiply: FLOPs x the sum of their seconds per FLOP. A zero
        # anywhere makes the FLOPs 0; the lookup there is clamped, so finite.
        numbers: list[Any] = []
        sizes: dict[tuple[Any, ...], tuple[Any, list[np.ndarray], Any]] = {}
        nd = np.ndarray  # (``predict_grid`` makes no 0-d arrays: an ndarray here has an axis)
        skip = 0
        for at, g in enumerate(products):
            if skip:  # (read with a weight's forward product: ``_weight``)
                skip -= 1
                continue
            count, M, K, N = g
            if type(M) is nd and type(K) is not nd and type(N) is not nd and type(count) is not nd:
                spf = self._weight(products, at, launches)
                if spf is not _MISSING:  # the forward product and its two backward ones
                    skip = 2
                    key = (2 * math.prod([count, K, N]), id(M))
                    hit = sizes.get(key)
                    sizes[key] = (key[0], [M], spf if hit is None else hit[2] + spf)
                    continue
            arrays = [x for x in g if type(x) is nd]
            if not arrays:
                numbers.append(self.gemm(count, M, K, N, launches))
                continue
            if len(arrays) > 1:
                arrays.sort(key=id)
            flops = 2 * math.prod([x for x in g if type(x) is not nd])
            key = (flops, *map(id, arrays))
            # one launch runs count / launches products: looked up as their stacked GEMM
            per = count / launches if launches else 1
            stacked = M if (type(per) is not nd and per == 1) else self._stacked(M, per)
            spf = self._seconds_per_flop(stacked, N, K)
            hit = sizes.get(key)
            sizes[key] = (flops, arrays, spf if hit is None else hit[2] + spf)
        return _sum(numbers + [_product(flops, *arrays) * spf for flops, arrays, spf in sizes.values()])

    def _weight(self, products: list[tuple[Any, Any, Any, Any]], at: int, launches: int) -> Any:
        """The seconds per FLOP of a weight's three products in a training step, summed (forward
        (T x K) @ (K x N), dA (T x N) @ (N x K), dB (K x T) @ (T x N): ``backward_gemms``), where
        products[at:at + 3] are those, T the one array, one product a launch, and the table is
        read over the M and K axes; else _MISSING. One lookup for the three: the forward and dA
        curves over T's M axis (the same points below the top and positions) are gathered and
        exponentiated stacked, then dB's curve over the K axis is added (``Partial``); each
        point sums the same values in the same order as the three read apart."""
        count, M, K, N = products[at]
        if at + 2 >= len(products) or not self._stacks or (launches and count != launches):
            return _MISSING
        g1, g2 = products[at + 1], products[at + 2]
        if not (g1[1] is M and g2[2] is M and g1[0] == count and g2[0] == count and g1[2] == N
                and g1[3] == K and g2[1] == K and g2[3] == N):
            return _MISSING
        # (K, N) and (N, K) are one pair: one weight's forward and dA are another's dA and forward
        # (attention's q and out, an FFN's up and down); their sum in either order the same floats
        lo, hi = (K, N) if K <= N else (N, K)
        pair = self._lookup("pair", (lo, hi), [M], lambda: self._pair(M, lo, hi))
        return pair + self._seconds_per_flop(K, N, M)

    def _pair(self, T: np.ndarray, K: Any, N: Any) -> Any:
        """The seconds per FLOP of (T x K) @ (K x N) and (T x N) @ (N x K), summed: the two curves
        over the table's M axis read at T's positions stacked (one gather, one exp)."""
        forward, slopes_f = self._curve((None, N, K))
        da, slopes_a = self._curve((None, K, N))
        lx, grid = self._log(T), self._axes[0]
        pair: Any
        below = self._lookup("below", ("m",), [lx], lambda: _below(lx, grid))
        if below is not None and not below.size:
            pair = math.exp(forward[-1]) + math.exp(da[-1])
        else:
            i, t = self._lookup("position", ("m",), [lx], lambda: positions(
                lx if below is None else lx.take(below), grid))
            values, slopes = self._profile.pair(forward, slopes_f, da, slopes_a)
            both = values.take(i, axis=1)  # (``[:, i]`` takes numpy's general path: 5x the time)
            both += t * slopes.take(i, axis=1)
            np.exp(both, out=both)
            pair = both[0] + both[1]
            if below is not None:
                pair = Partial(math.exp(forward[-1]) + math.exp(da[-1]), below, pair, lx.shape)
        return pair

    def memory(self, moved: Any, ops: int) -> Any:
        moved = _number(moved)
        if not _array(moved):
            per_op = moved / ops
            return moved / (self.bandwidth * self.eff.memory(per_op)) if per_op else 0.0
        table = self.eff.memory
        if self._memory_log is not None:
            # In log space: moved / (bandwidth x e(moved / ops)) with log(1 / (bandwidth x e))
            # read at log moved on the grid shifted by log ops (no per-op array), exponentiated
            # once; e on its envelope, itself a log-log table (``grid_lookup.log_envelope_table``).
            grid, log_s = self._memory_log
            return self._lookup("memory", (ops,), [moved], lambda: moved * self._exp_interp(
                self._log(moved), grid + math.log(ops), log_s, ("memory", ops)))
        if len(table.bytes) == 1:  # one size: its value everywhere, as ``_lookup`` holds it
            return moved / (self.bandwidth * table.efficiency[0])
        return self._lookup("memory", (ops,), [moved], lambda: self._memory_steps(moved, ops))

    def _memory_steps(self, moved: np.ndarray, ops: int) -> np.ndarray:
        """A step memory table's moved / (bandwidth x max(e(x), x above[i])) (x = moved / ops, i
        the grid points <= x: ``efficiency._lookup``'s envelope) as the least of moved x the
        step's seconds per byte and a bigger point's ops / (bandwidth above[i]); i found on the
        grid times ops (no pass for x; ``Prepared.memory_steps``)."""
        points, per_byte, bigger = self._profile.memory_steps(ops)
        i = points.searchsorted(moved, side="right")  # (the method: no wrapper)
        t = moved * per_byte.take(i)
        out: np.ndarray = np.minimum(t, bigger.take(i), out=t)
        return out

    def at_least_memory(self, t: Any, moved: Any, ops: int) -> Any:
        # The bytes at the memory table's least efficiency bound the memory time from above:
        # where that bound is below t (a linear is compute-bound), t is the maximum exactly, so
        # the table is read only at the other points.
        moved = _number(moved)
        if not _array(moved) and not _array(t):
            return max(t, self.memory(moved, ops))
        over = moved / (self.bandwidth * self._least_memory) > t
        if not over.any():
            return t
        if over.mean() > 0.5:
            return np.maximum(t, self.memory(moved, ops))
        out = np.array(np.broadcast_to(t, over.shape))
        some = np.broadcast_to(moved, over.shape)[over]
        table = self.eff.memory
        e = self._size_efficiency(table.bytes, table.efficiency, table.interpolation, some / ops, memo=False,
                                  above=above(table))
        out[over] = np.maximum(out[over], some / (self.bandwidth * e))
        return out

    def roof(self, flops: tuple[Any, ...], nbytes: Any) -> Any:
        # Every array made here is new, so ``at_least`` may write into it; FLOPs that are a
        # number 0 (a linear without a bias adds none) make no pass.
        by_flops, by_bytes = _per(flops, self.peak), _per((nbytes,), self.bandwidth)
        nd = np.ndarray
        flops_array, bytes_array = type(by_flops) is nd, type(by_bytes) is nd
        if not flops_array and not bytes_array:
            return max(by_flops, by_bytes)  # ``physics_floor``
        if not flops_array and not by_flops:  # no FLOPs (a copy): no pass for them
            return by_bytes
        if bytes_array and flops_array and by_bytes.shape == by_flops.shape:
            return np.maximum(by_bytes, by_flops, out=by_bytes)
        return self.maximum(by_flops, by_bytes)  # an array made here, or a new one

    def at_least(self, t: Any, roof: Any, ops: int) -> Any:
        launch = ops * self.floor_s
        if type(roof) is not np.ndarray:
            return self.maximum(t, roof + launch)
        if launch:
            roof += launch  # (``roof``'s own array)
        if type(t) is np.ndarray and t.shape != roof.shape:
            return np.maximum(t, roof)
        return np.maximum(t, roof, out=roof)

    def first_touch(self, outputs: list[tuple[int, tuple[Any, ...]]]) -> Any:
        table = self.eff.first_touch
        if table is None:
            return 0.0
        terms = []
        nd = np.ndarray
        for n, factors in outputs:
            if not n:
                continue
            factors = tuple([x if type(x) in _PLAIN else _number(x) for x in factors])
            arrays = [x for x in factors if type(x) is nd]
            if not arrays:  # a number (a weight's gradient, K x N): kept by the profile
                key = (n, factors)
                hit = self._profile.fresh_numbers.get(key)
                if hit is None:
                    hit = self._profile.fresh_numbers[key] = first_touch_s(self.eff, [(n, factors)])
                terms.append(hit)
                continue
            number = math.prod([x for x in factors if type(x) is not nd])
            hit = self._memo.get(("fresh", (n, number), *map(self._canonical, arrays)), _MISSING)
            terms.append(self._fresh(n, number, arrays) if hit is _MISSING else hit)
        return _sum(terms)

    def _fresh(self, n: int, number: Any, arrays: list[np.ndarray]) -> Any:
        """n ops' first touch of outputs of number x the arrays' bytes (kept for the call)."""
        if len(arrays) == 1 and number > 0:  # x = number x a: its least and largest are a's times number
            a = arrays[0]  # (x -> fl(number x) is monotone: the same floats as x's own min and max)
            least, top = self._lookup("range", (), [a], lambda: (a.min(), a.max()))
            least, top, x = least * number, top * number, None
        else:
            x = _product(number, *arrays)
            least, top = x.min(), x.max()
        if self._fresh_from is None or top < self._fresh_from:
            out: Any = 0.0  # every size at a rate of 0
        else:  # n ops' seconds per byte, below the grid 0 (n in the table: no pass for it)
            if x is None:
                x = _product(number, *arrays)  # (new: written in place below)
            points, steps, by_exponent = self._fresh_steps(n)
            lo, hi = points.searchsorted((least, top), side="right")
            if lo == hi:  # every size on one step (most often past the allocator's threshold): its rate
                out = np.multiply(x, steps.item(lo), out=x)
            else:
                out = step_at(points, steps, x, by_exponent)
                out = np.multiply(x, out, out=out) if out.shape == x.shape and out.base is None else x * out
        self._remember("fresh", (n, number), arrays, out)
        return out

    def _fresh_steps(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The first-touch table of n ops as ``grid_lookup.steps_of`` gives it, and its values by
        exponent (``exponent_steps``): kept by the profile."""
        hit = self._profile.fresh.get(n)
        if hit is None:
            table = self.eff.first_touch
            assert table is not None
            rates = (0.0, *(n * r for r in table.s_per_byte))  # below the grid 0
            points, steps = steps_of(tuple(table.bytes), rates)
            hit = self._profile.fresh[n] = (points, steps, exponent_steps(points, steps))
        return hit

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        if _array(a) and _array(b):
            return np.maximum(a, b)
        if _array(a) or _array(b):  # the floor: most often below every point (a reduction tells)
            array, number = (a, b) if _array(a) else (b, a)
            return array if array.min() >= number else np.maximum(array, number)
        return max(a, b)

    @staticmethod
    def scale(t: Any, num: Any, den: Any) -> Any:
        num, den = _number(num), _number(den)
        if not _array(num) and not _array(den):
            return t * (num / den) if den else t
        return t * np.where(den > 0, num / np.maximum(den, 1), 1.0)

    def _stacked(self, M: Any, per: Any) -> Any:
        """M x per, one array per distinct (M, per) (the same stacked rows share their lookups);
        past one end of a shape table at every point, that end (a number: the lookup holds it)."""
        arrays = [x for x in (M, per) if _array(x)]
        numbers = tuple(None if _array(x) else x for x in (M, per))
        if not arrays:
            return M * per

        def stack() -> Any:
            x = _product(M, per)
            if isinstance(self.table, MatmulTable):
                lo, hi = self.table.M[0], self.table.M[-1]
                if x.min() >= hi:
                    return float(hi)
                if x.max() <= lo:
                    return float(lo)
            if len(arrays) == 2 and x.size > 4 * (M.size + per.size) and M.min() > 0 and per.min() > 0:
                # an outer product (seq x batch): its log is the sum of theirs, 200 logs, not 10,000
                self._remember("log", (), [x], self._logs.outer(x, self._log(M), self._log(per)))
            return x

        return self._lookup("stack", numbers, arrays, stack)

    # --- lookups ------------------------------------------------------------------------------

    def _lookup(self, kind: str, numbers: tuple[Any, ...], arrays: list[np.ndarray], compute: Any) -> Any:
        """compute(), once per (kind, numbers, arrays' values): equal arrays share a token
        (``_canonical``), so a T array built twice, or two norms' equal bytes, share a lookup."""
        of = self._canonical  # (most lookups have one array: no list for the tokens)
        key = (kind, numbers, of(arrays[0])) if len(arrays) == 1 else (kind, numbers, *map(of, arrays))
        hit = self._memo.get(key, _MISSING)
        if hit is _MISSING:
            hit = self._memo[key] = compute()
        return hit

    def _remember(self, kind: str, numbers: tuple[Any, ...], arrays: list[np.ndarray], value: Any) -> None:
        """What ``_lookup`` would compute for these arrays, known beforehand."""
        key = (kind, numbers, *map(self._canonical, arrays))
        self._memo[key] = value

    def _exp_interp(self, lx: np.ndarray, xp: np.ndarray, fp: np.ndarray, name: tuple[Any, ...],
                    slopes: np.ndarray | None = None) -> Any:
        """exp(np.interp(lx, xp, fp)), interpolated only where lx is below xp's last point (`name`
        names xp); above it exp(fp[-1]), at most of a sweep's points: then a ``Partial``. The
        points below are found once per array and grid (a layer's linears share T); with
        `slopes` (np.diff(fp)) their positions too: each curve is two gathers, not a search."""
        below = self._lookup("below", name, [lx], lambda: _below(lx, xp))
        if below is not None and not below.size:
            return math.exp(fp[-1])
        if slopes is not None:
            i, t = self._lookup("position", name, [lx], lambda: positions(
                lx if below is None else lx.take(below), xp))
            values = np.exp(fp.take(i) + t * slopes.take(i))
        else:
            values = np.exp(np.interp(lx if below is None else lx.take(below), xp, fp))
        # not spread over the points: the caller multiplies it by the FLOPs or the bytes
        return values if below is None else Partial(math.exp(fp[-1]), below, values, lx.shape)

    def _log(self, x: np.ndarray) -> np.ndarray:  # a zero size (not run): the grid's first point
        logs: np.ndarray = self._lookup("log", (), [x], lambda: self._logs.new(x))
        return logs

    def _seconds_per_flop(self, M: Any, N: Any, K: Any) -> Any:
        """1 / (peak x the table's efficiency) of (M x K) @ (K x N), some of them arrays (the
        peak folded into the log table: exp(-(log peak + log e)), equal to 1e-16)."""
        table = self.table
        if isinstance(table, FlopsTable):  # by 2MNK alone: forward and backward share it
            arrays = sorted((x for x in (M, N, K) if _array(x)), key=id)
            scalar = math.prod(x for x in (M, N, K) if not _array(x))
            if not table.time_rises:  # the envelope's efficiency, then its inverse
                def spf_envelope() -> Any:
                    e = self._size_efficiency(table.flops, table.efficiency, table.interpolation,
                                              _product(2, scalar, *arrays), above=table.above)
                    return 1 / (self.peak * e)

                return self._lookup("flops", (scalar,), arrays, spf_envelope)
            # a table of seconds per FLOP: log-log and step interpolation commute with 1 / x
            spf = [1 / (self.peak * e) for e in table.efficiency]
            return self._lookup("flops", (scalar,), arrays, lambda: self._size_efficiency(
                table.flops, spf, table.interpolation, _product(2, scalar, *arrays)))
        nd = np.ndarray
        numbers = (None if type(M) is nd else M, None if type(N) is nd else N, None if type(K) is nd else K)
        arrays = [x for x in (M, N, K) if type(x) is nd]
        return self._lookup("mnk", numbers, arrays, lambda: self._matmul_seconds(M, N, K))

    def _matmul_seconds(self, M: Any, N: Any, K: Any) -> Any:
        """1 / (peak x e(M, N, K)) of a MatmulTable: exp of the log table (-log(peak x e)) read
        at its number axes (and axes of one grid point: ``at_numbers``), then interpolated over
        the array axes (``interpolate_at``, at positions found once per array)."""
        xs = tuple(None if _array(x) and len(g) > 1 else x
                   for x, g in zip((M, N, K), self._grids, strict=True))
        reduced, slopes = self._curve(xs)
        free = [(letter, grid, self._log(x)) for letter, x, grid, n in
                zip("mnk", (M, N, K), self._axes, xs, strict=True) if n is None]
        if not free:
            return np.exp(reduced)
        if len(free) == 1:
            letter, grid, lx = free[0]
            return self._exp_interp(lx, grid, reduced, (letter,), slopes)
        # each axis's positions once per array: a seq axis is read by the six products of a core
        where = [self._lookup("positions", (letter,), [lx], lambda grid=grid, lx=lx: positions(lx, grid))
                 for letter, grid, lx in free]
        return np.exp(interpolate_at(reduced, where))

    def _curve(self, xs: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The log table read at the number axes of `xs` (``at_numbers``; an array on an axis of
        one grid point reads that point) and its differences along the last axis left (a
        curve's slopes, for ``_exp_interp``): the same at every call, kept by the profile."""
        key = tuple(None if x is None else (x if not _array(x) else "one") for x in xs)
        hit = self._profile.curves.get(key)
        if hit is None:
            reduced = at_numbers(self._log_table, self._grids, xs)
            hit = self._profile.curves[key] = (reduced, np.diff(reduced) if reduced.ndim == 1 else reduced)
        return hit

    def _size_efficiency(self, grid: list[float], efficiency: list[float], interpolation: str,
                         x: Any, memo: bool = True, above: list[float] | None = None) -> Any:
        """A size table at every x (`memo`: x's log kept for reuse): a number at a number x,
        else an array; on the time envelope (``efficiency._lookup``) when given its `above`
        (None: the table is its own envelope, ``time_rises``)."""
        if not _array(x):
            if above is None:
                return _raw(grid, efficiency, x, interpolation)  # type: ignore[arg-type]
            return _lookup(grid, efficiency, x, interpolation, above)  # type: ignore[arg-type]
        if len(grid) == 1:  # one size: its value everywhere, as ``_lookup`` holds it
            return efficiency[0]
        if above is None:
            if interpolation == "step":  # below the grid: its first value
                return step(grid[1:], efficiency, x)
            lx = self._log(x) if memo else np.log(np.maximum(x, 1e-300))
            return np.exp(np.interp(lx, np.log(grid), np.log(efficiency)))
        # on the envelope: above[number of grid points <= x], the best rate per size of a
        # bigger grid point, found with the step's own index
        points, steps, rates = table_arrays(tuple(grid), tuple(efficiency), tuple(above))
        i = points.searchsorted(x, side="right")
        if interpolation == "step":
            e = steps.take(i)
        else:
            lx = self._log(x) if memo else np.log(np.maximum(x, 1e-300))
            e = np.exp(np.interp(lx, np.log(grid), np.log(efficiency)))
        bigger = x * rates.take(i)
        return np.maximum(e, bigger, out=bigger)


def predict_grid(spec: Spec, phase: str, batch: np.ndarray, seq: np.ndarray, hw: Hardware,
                 dtype: str = "bf16",
                 kernels: Kernels = Kernels(), enc_seq: np.ndarray | None = None, mla: str = "naive",
                 routing: str = "uniform", select: Callable[[Key], bool] | None = None) -> np.ndarray:
    """Calibrated seconds of `phase` at every (batch, seq) (broadcast together), as ``predict``
    of ``analyze(spec, phase, batch, seq, dtype, enc_seq, mla=mla, routing=routing)``; with
    `select`, of the components it selects only (by key: the sum of ``predict``'s rows whose
    key it selects; ``costmodel.deploy`` splits a step into the attention core and the rest).

    Needs a profile with tables for `dtype` (``Hardware.tables_for``). Sizes are float64: exact
    below 2^53, never wrapping as int64 past 2^63. A big grid runs in blocks (``grid_blocks``)."""
    blocks = phase != "decode" and in_blocks(lambda b, s, e: predict_grid(
        spec, phase, b, s, hw, dtype, kernels, e, mla, routing, select), (batch, seq, enc_seq))
    if isinstance(blocks, np.ndarray):  # a grid past the cache, in blocks
        return blocks
    if not hw.tables_for(dtype):
        from costmodel.analysis import AnalysisError
        from costmodel.runtime.timing import no_tables_note

        raise AnalysisError(no_tables_note(hw, dtype))
    eff = hw.efficiency
    assert eff is not None
    ph = PHASES[phase]
    # Not broadcast up front: a quantity that depends on one axis stays that axis's size.
    B, seq = np.asarray(batch, dtype=float), np.asarray(seq, dtype=float)
    enc = np.asarray(enc_seq if enc_seq is not None else seq, dtype=float) if spec.is_encoder_decoder else 0
    shape = np.broadcast_shapes(B.shape, seq.shape, np.shape(enc))
    # A number as an array of one point: the rule's arrays all have an axis (``_array``).
    B, seq = B.reshape(B.shape or (1,)), seq.reshape(seq.shape or (1,))
    if isinstance(enc, np.ndarray):
        enc = enc.reshape(enc.shape or (1,))
    p = DTYPE_BYTES[dtype]
    tables = hw.kernel_tables()
    attention = (AttentionKernel(tables, "prefill" if phase == "prefill" else "decode", dtype)
                 if tables is not None and phase in ("prefill", "decode") else None)
    rates = GridRates(eff, hw.peak(dtype), hw.memory_bandwidth, dtype, attention)
    total = np.zeros(np.broadcast_shapes(B.shape, seq.shape, np.shape(enc)))
    # One layer of each kind (the rule multiplies by the layers), off the spec's plan (``grid_plan``)
    dropped, timed = components(spec, ph, p, mla, routing, B, seq, enc, kernels, select, rates.canonical)
    for key, (cost, layers) in timed.items():
        # Where it does nothing (no FLOPs, no bytes) predict skips its row: no floor either.
        idle = None
        if not _positive(cost.bytes_unfused):
            busy = cost.matmul + cost.other + cost.bytes_unfused
            if not _array(busy):
                if busy == 0:
                    continue
            elif np.any(busy == 0):
                idle = busy == 0
        gemms = tuple([(c * layers, m, k, n) for c, m, k, n in cost.gemms])
        part = component_time(spec, key, gemms, Whole(ph, cost, layers), layers, ph.training, kernels,
                              dropped, p, rates)
        total += part.time_s if idle is None else np.where(idle, 0.0, part.time_s)
    return total.reshape(shape)
