"""The cost of one component, and the primitives every component is built from.

Formulas are written once, over a ``Dims`` whose fields are either sympy symbols (for the
formula a user reads, and for lambdified sweeps) or plain integers (for numbers, exact and
fast). The helpers ``smin``, ``smax`` and ``half`` keep both modes exact: they call sympy only
when an argument is symbolic.

Conventions (docs/reference.md, "Counting conventions"):
- a (M x K) @ (K x N) product costs 2*M*K*N FLOPs, as torch's FlopCounterMode counts it;
- every other op costs a fixed number of FLOPs per output element, stated where it is defined;
- unfused bytes: an op reads each input and writes each output once, weights included;
- the fused lower bound keeps only what must cross the memory bus once: weights read,
  KV cache read and written, model input read and model output written.
All costs are for one forward pass of the phase's shape; ``phases`` turns them into a phase.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    import sympy

Num = Union[int, "sympy.Expr"]


def is_array(x: object) -> bool:
    """A numpy array (costmodel.runtime.timing_grid evaluates the tree over many shapes at once)."""
    return hasattr(x, "__array_ufunc__")


def _bounded(a: Any, b: Any, least: bool) -> Any:
    """min (`least`) or max of a and b over arrays; where one is a number on one side of every
    point of the other, that one as it stands: a reduction, not a new array and the passes over
    it that follow (``runs``' min(B x S, 1) is 1 across a sweep; a window past every length)."""
    later = getattr(a, "later", None) or getattr(b, "later", None)
    if later is not None:  # the sweep's tree planned once (runtime/grid_plan): bounded when evaluated
        return later(_bounded, a, b, least)
    import numpy

    array, number = (a, b) if is_array(a) and not is_array(b) else (b, a)
    if not is_array(array) or is_array(number) or getattr(array, "ndim", 0) == 0 or not array.size:
        return numpy.minimum(a, b) if least else numpy.maximum(a, b)
    # The least first, the largest only where it decides (one reduction, not two, for
    # ``runs``' tokens and a maximum's floor below every point); the same answers in the same
    # order: the array where both hold (it equals the number at every point).
    lo = array.min()
    if least:
        if lo > number:
            return number
        hi = array.max()
        if hi <= number:
            return array
        if lo >= number:
            return number
        return numpy.minimum(a, b)
    if lo >= number:
        return array
    if array.max() <= number:
        return number
    return numpy.maximum(a, b)


def smin(a: Num, b: Num) -> Num:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    if is_array(a) or is_array(b):
        return _bounded(a, b, least=True)
    import sympy  # already loaded: an argument is symbolic

    return sympy.Min(a, b)


def smax(a: Num, b: Num) -> Num:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    if is_array(a) or is_array(b):
        return _bounded(a, b, least=False)
    import sympy

    return sympy.Max(a, b)


def floor_div(a: Num, b: Num) -> Num:
    """floor(a / b) for sizes: exact integer division, or sympy's floor of a symbol."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if is_array(a) or is_array(b):
        return a // b
    import sympy

    return sympy.floor(a / b)


def half(x: Num) -> Num:
    """x / 2 for a quantity known to be even (a count of pairs)."""
    if isinstance(x, int):
        q, rem = divmod(x, 2)
        if rem:
            raise ArithmeticError(f"half of an odd count {x}")
        return q
    if is_array(x):
        return x // 2
    return x / 2


def triangle(n: Num) -> Num:
    """1 + 2 + ... + n."""
    return half(n * (n + 1))


@dataclass(frozen=True, init=False)
class Cost:
    """What one component costs in one forward pass. Fields are sums over its instances.

    params         parameters it owns
    matmul         matmul FLOPs, dense convention (masked scores counted in full)
    matmul_eff     matmul FLOPs a kernel that skips masked scores would execute
    other          non-matmul FLOPs
    bytes_unfused  unfused memory traffic (the phase's ``bytes_unfused``)
    weights_read   fused bound: bytes of weights read once
    kv_read        fused bound: bytes of cached K/V read
    kv_write       fused bound: bytes of K/V written into the cache
    act_in         fused bound: model input read (token ids)
    act_out        fused bound: model output written (logits)
    kv_cache       bytes held in the KV cache after the pass
    saved          training: bytes of the tensors its ops keep for backward, each storage once
                   (a tensor several ops keep is counted by the first; ``costmodel.runtime.memory``)
    mask_elements  training: elements of the dropout masks it keeps (bytes per element are the
                   kernel's: 1 for a fused bool mask, the activation width for a composite one)
    matrices       parameters that are weight matrices of linear layers (what weight-only
                   quantisation quantises)
    factored       elements of a factored second moment (Adafactor, Shazeer & Stern 2018): rows
                   + columns of every matrix, every element of a vector
    train_only     exists only in a training step (loss, dropout)
    gemms          the matmuls behind ``matmul``, as (count, M, K, N): count products of
                   (M x K) @ (K x N), for the time model (``costmodel.runtime.timing``)
    """

    params: Num = 0
    matmul: Num = 0
    matmul_eff: Num = 0
    other: Num = 0
    bytes_unfused: Num = 0
    weights_read: Num = 0
    kv_read: Num = 0
    kv_write: Num = 0
    act_in: Num = 0
    act_out: Num = 0
    kv_cache: Num = 0
    saved: Num = 0
    mask_elements: Num = 0
    matrices: Num = 0
    factored: Num = 0
    train_only: bool = False
    gemms: tuple[Gemm, ...] = ()

    def __init__(self, params: Num = 0, matmul: Num = 0, matmul_eff: Num = 0, other: Num = 0,
                 bytes_unfused: Num = 0, weights_read: Num = 0, kv_read: Num = 0, kv_write: Num = 0,
                 act_in: Num = 0, act_out: Num = 0, kv_cache: Num = 0, saved: Num = 0,
                 mask_elements: Num = 0, matrices: Num = 0, factored: Num = 0, train_only: bool = False,
                 gemms: tuple[Gemm, ...] = ()) -> None:
        # The fields above, written into the instance's dictionary at once: the frozen
        # dataclass's own __init__ calls object.__setattr__ per field, 3 us a Cost where the
        # time grid builds a few hundred a call (tests/test_grid_merge.py holds the two in step).
        d = self.__dict__
        d["params"], d["matmul"], d["matmul_eff"], d["other"] = params, matmul, matmul_eff, other
        d["bytes_unfused"], d["weights_read"], d["kv_read"], d["kv_write"] = (
            bytes_unfused, weights_read, kv_read, kv_write)
        d["act_in"], d["act_out"], d["kv_cache"], d["saved"] = act_in, act_out, kv_cache, saved
        d["mask_elements"], d["matrices"], d["factored"] = mask_elements, matrices, factored
        d["train_only"], d["gemms"] = train_only, gemms

    def __add__(self, o: Cost) -> Cost:
        sums = {n: plus(getattr(self, n), getattr(o, n)) for n in _QUANTITIES}
        return Cost(**sums, train_only=self.train_only and o.train_only, gemms=self.gemms + o.gemms)

    def times(self, n: Num) -> Cost:
        """The cost of n identical instances (n layers of one kind)."""
        if isinstance(n, int) and n == 1:  # the grid evaluates one layer of each kind
            return self
        return Cost(**{q: getattr(self, q) * n for q in _QUANTITIES}, train_only=self.train_only,
                    gemms=tuple((c * n, m, k, nn) for c, m, k, nn in self.gemms))


_QUANTITIES = tuple(f.name for f in fields(Cost) if f.name not in ("train_only", "gemms"))


def plus(a: Num, b: Num) -> Num:
    """a + b, and the other one as it stands where one is the integer 0: over arrays (the time
    grid) adding 0 is a pass that allocates a copy; integers and sympy sums are the same."""
    if type(b) is int and b == 0:
        return a
    if type(a) is int and a == 0:
        return b
    return a + b

Gemm = tuple[Num, Num, Num, Num]  # (count, M, K, N): count products (M x K) @ (K x N)


def gemm(count: Num, M: Num, K: Num, N: Num) -> Gemm:
    """`count` products of (M x K) @ (K x N), 2*M*K*N FLOPs each (a batched matmul: count =
    its batch)."""
    return (count, M, K, N)


@dataclass(frozen=True)
class Dims:
    """Values for the alphabet of ``symbols``: all symbols, or all integers.

    The pass's shape (B, S, C, S_e, C_e) and p are fields; the model sizes (d, h, k, d_h, f, V,
    ...) are the symbols the elements declare (``components.size_symbols``), held in ``sizes``
    and read as attributes: ``dims.d``. Layer counts are looked up by (stack, kind), see
    ``symbols.layer_count``. ``p_kv`` is the bytes per element of the KV cache when it is not
    the activations' (an fp8 cache beside bf16 activations; numbers only: the symbolic tree
    writes the cache at p), read through ``kv_p``.
    """

    B: Num
    S: Num
    C: Num
    S_e: Num
    C_e: Num
    p: Num
    p_kv: Num | None = None
    sizes: dict[str, Num] = field(default_factory=dict)
    layers: dict[tuple[str, str | None], Num] = field(default_factory=dict)
    mla: str = "naive"  # how latent attention runs: "naive" or "absorbed" (components.mla)
    routing: str = "uniform"  # experts a sparse layer reads: "uniform" or "worst" (components.moe)
    #: Every component outside the matmuls and the attention core one kernel (``--kernels flash``):
    #: it keeps for backward what its kernel can, its inputs and per-row statistics, never an
    #: intermediate it does not write (a norm's fp32 copies, a gated activation's f(gate)).
    one_kernel: bool = False

    @property
    def kv_p(self) -> Num:
        """Bytes per element of what the KV cache holds, reads and writes."""
        return self.p if self.p_kv is None else self.p_kv

    def __getattr__(self, name: str) -> Num:
        try:
            sizes: dict[str, Num] = self.__dict__["sizes"]
            return sizes[name]
        except KeyError:
            raise AttributeError(f"Dims has no size {name!r}") from None


# --- primitives -------------------------------------------------------------------------


def runs(tokens: Num) -> Num:
    """1 when a component processes any token in this pass, 0 when it does not run at all.

    Weights are read only by a component that runs: in decode, an encoder-decoder's encoder
    (S_e = 0) and its cross-attention K/V projections read nothing. Min(B*S, 1) is 1 for the
    positive symbols of a decoder, so their formulas read as before.
    """
    return smin(tokens, 1)


def linear(tokens: Num, d_in: Num, d_out: Num, bias: bool, p: Num, saves_input: bool = True) -> Cost:
    """y = x W (+ b) over `tokens` rows: 2*tokens*d_in*d_out FLOPs; the bias add is elementwise.

    For backward it keeps its input x (dW = x^T dy); `saves_input` is False for a linear whose
    input another already keeps (k and v beside q, up beside gate)."""
    params = d_in * d_out + (d_out if bias else 0)
    read = p * params * runs(tokens)
    # Sizes before tokens in products: one array operation each when tokens is an array (the
    # time grid); the same integers and sympy products either way.
    flops = 2 * d_in * d_out * tokens
    # Over arrays, the sizes' sum first: two passes, not five (integers below 2^53: the same floats)
    moved = (p * (d_in + d_out)) * tokens if is_array(tokens) else p * (d_in * tokens + d_out * tokens)
    return Cost(
        params=params,
        matmul=flops,
        matmul_eff=flops,
        other=d_out * tokens if bias else 0,
        bytes_unfused=moved + read,
        weights_read=read,
        gemms=(gemm(1, tokens, d_in, d_out),),
        saved=p * d_in * tokens if saves_input else 0,
        matrices=d_in * d_out,
        factored=d_in + d_out + (d_out if bias else 0),
    )


def elementwise(elements: Num, flops_per: int, p: Num, inputs: int = 1, extra_bytes: Num = 0,
                saves: int = 0) -> Cost:
    """An op over `elements` outputs reading `inputs` tensors of that size (plus `extra_bytes`);
    `saves` tensors of that size are kept for backward (softmax and tanh keep their output)."""
    # (over arrays no pass for x 1 or + 0: the same values, one pass fewer each)
    return Cost(other=elements if flops_per == 1 else flops_per * elements,
                bytes_unfused=plus(p * (inputs + 1) * elements, extra_bytes),
                saved=p * saves * elements if saves else 0)
