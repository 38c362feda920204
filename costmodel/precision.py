"""Inference precision beside the activations' dtype: the weights' (a float width, an FP8
checkpoint's per-tensor or 128 x 128 block-scaled fp8, NVIDIA's NVFP4, int8/int4 weight-only
quantisation with group scales, MXFP4 experts) and the KV cache's.

One rule for every command: ``memory`` holds the weights and the cache at these widths, and
``analyze``/``inference`` read and write them at these widths (bytes, roofline and calibrated
time). Training runs at the activations' dtype (mixed precision is ``costmodel.runtime.memory``'s
recipe), so these are inference options.

- fp32, bf16 and fp16 hold every parameter at their width.
- fp8 holds what a per-tensor FP8 checkpoint holds: the linear layers' matrices
  (``Cost.matrices``) at 1 byte (E4M3), the LM head and a mixture of experts' router excepted,
  each quantised matrix with one fp32 ``weight_scale`` and one fp32 ``input_scale`` (8 bytes a
  matrix; the experts' matrices one each per expert); embeddings, head, router, norms and biases
  stay at the activations' width. That is NVIDIA ModelOpt's ``FP8_DEFAULT_CFG``
  (NVIDIA/TensorRT-Model-Optimizer, ``modelopt/torch/quantization/config.py``, commit 0991404:
  per-tensor weight and input quantizers, ``axis: None``, on every ``nn.Linear``; its
  ``_default_disabled_quantizer_cfg`` turns off ``*lm_head*``, ``*router*``,
  ``*block_sparse_moe.gate*``, ``*mlp.gate.*`` and every other module), which NVIDIA's ``*-FP8``
  checkpoints come from ("Only the weights and activations of the linear operators within
  transformers blocks are quantized": nvidia/Llama-3.1-405B-Instruct-FP8's model card). The
  scales' fp32 width and one pair per expert are assumed, not read off a checkpoint's index; they
  are 8 bytes a matrix either way.
- fp8-block holds what a block-scaled FP8 checkpoint holds (DeepSeek-V3/R1's and Qwen3's own:
  config.json ``quantization_config`` {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme":
  "dynamic", "weight_block_size": [128, 128]}): the same matrices as fp8 at 1 byte (E4M3), each
  weight tensor of k x n with one fp32 ``weight_scale_inv`` per 128 x 128 block, ceil(k / 128) x
  ceil(n / 128) of them (a block past an edge is zero-padded: a 576-wide kv_a has 5 rows of
  blocks), no input scale (activations are quantised per token in groups of 128 as they run). What
  stays at the activations' width is fp8's: the LM head, the embedding, a mixture of experts' router
  (``mlp.gate``), norms and biases. DeepSeek-V3's reference model makes every ``Linear`` fp8 with
  that scale grid and builds its head in the default dtype, its router's weight a plain bf16
  parameter (deepseek-ai/DeepSeek-V3 ``inference/model.py``, commit 9b4e978: ``Linear.__init__``,
  ``Gate``, ``Transformer.head``; README_WEIGHTS.md: "FP8 weight format with 128x128 block
  scaling"), kv_a (``kv_a_proj_with_mqa``) included; Qwen3's FP8 checkpoints list ``lm_head``, every
  ``mlp.gate`` and the norms in ``modules_to_not_convert`` (Qwen/Qwen3-30B-A3B-FP8's config.json, as
  quoted in vllm-project/llm-compressor issue #1758). The router's fp32 score bias of DeepSeek-V3
  (256 values a layer) is not in the spec and not counted.
- nvfp4 holds what NVIDIA's ModelOpt NVFP4 checkpoints hold (``nvidia/*-FP4``: hf_quant_config.json
  {"quant_algo": "NVFP4", "group_size": 16}): the matrices fp8 quantises (every linear layer's but
  the LM head's and the router's: ModelOpt's ``NVFP4_DEFAULT_CFG``, ``modelopt/torch/quantization/
  config.py``: weight and input quantizers of ``num_bits`` (2, 1), ``block_sizes`` {-1: 16,
  ``scale_bits`` (4, 3)}, and fp8's ``_default_disabled_quantizer_cfg``) in 4-bit E2M1, two to a
  byte, each 16 consecutive elements along a row's input dimension (K) sharing one FP8 E4M3
  ``weight_scale``, so a k x n tensor holds k x n / 2 bytes and n x ceil(k / 16) scale bytes, plus
  one fp32 ``weight_scale_2`` (the per-tensor second level) and one fp32 ``input_scale`` (the
  activations' per-tensor scale): 8 bytes a tensor, as fp8's pair. 4 + 8/16 = 4.5 bits an element
  before the per-tensor pair. The format: NVIDIA, "Introducing NVFP4 for Efficient and Accurate
  Low-Precision Inference" (NVIDIA technical blog, 2025: E2M1 elements, an E4M3 scale per 16-value
  micro-block, an FP32 per-tensor scale); the checkpoint layout (``weight`` U8 [n, k/2],
  ``weight_scale`` F8_E4M3 [n, k/16], ``weight_scale_2`` F32, ``input_scale`` F32): ModelOpt's
  export (NVIDIA/TensorRT-Model-Optimizer, ``modelopt/torch/export``; also NeMo AutoModel's NVFP4
  utilities, which document the same layout). Activations run at ``--dtype`` between the GEMMs (each
  quantised linear layer quantises its input to NVFP4 inside the kernel the tables time). NVIDIA's
  DeepSeek R1 FP4 checkpoints leave attention's projections unquantised (ModelOpt's
  ``NVFP4_MLP_ONLY_CFG`` quantises ``*mlp*`` alone; "Compared to nvidia/DeepSeek-R1-0528-FP4, this
  checkpoint additionally quantizes the wo module in attention layers": the -v2 model card); that is
  a checkpoint's choice, not the width's: bench/serving_validation.py says how it reads those cells.
- What a quantised width leaves unquantised is held at the activations' width, 16 bits where the
  activations are fp8 (``--dtype fp8`` is the matmuls' width: no checkpoint holds an embedding, a
  norm or a bias in fp8).
- int8 and int4 hold the matrices of the linear layers (``Cost.matrices``; the LM head excepted,
  as GPTQ, Frantar et al. 2023, and AWQ, Lin et al. 2024, leave it) at 8 or 4 bits, plus one
  fp16 scale per group of ``group_size`` weights of a component (128 by default, both papers'
  setting); embeddings, norms and biases stay at the activations' width.
- mxfp4 holds a mixture of experts' routed experts' matrices (``Key.routed_expert``) in OCP
  Microscaling FP4: 4-bit E2M1 elements and one 8-bit E8M0 scale shared by each block of 32, 4 +
  8/32 = 4.25 bits an element (Open Compute Project, OCP Microscaling Formats (MX) Specification
  v1.0, 2023, sections 5.1 and 5.3, Table 1: MXFP4, k = 32, scale E8M0). That is how gpt-oss's
  checkpoints hold them (config.json ``quantization_config`` {"quant_method": "mxfp4"}; the
  model card, arXiv:2508.10925, section 2.4: the MoE weights at 4.25 bits per parameter):
  attention, router, embeddings, head, norms and the experts' biases stay at the activations'
  width, and so does a model's shared experts. ``--group-size`` does not apply: MX fixes its block.
- The KV cache holds, is written and is read back at its own width; this pass's own keys and
  values are read at the activations' (``components.attention``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from costmodel.errors import AnalysisError
from costmodel.symbols import DTYPE_BYTES

if TYPE_CHECKING:  # precision loads no pydantic of its own
    from costmodel.spec import Spec

WEIGHT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "fp8-block", "nvfp4", "int8", "int4", "mxfp4")
FLOAT_WIDTHS = ("fp32", "bf16", "fp16")  # every parameter at the width
FP8 = "fp8"
FP8_SCALES = 2 * 4  # ModelOpt's fp32 weight_scale and input_scale, a quantised matrix each
FP8_BLOCK = "fp8-block"
FP8_CHECKPOINTS = (FP8, FP8_BLOCK)  # the matrices at 1 byte, the LM head and router left wide
BLOCK = 128  # weight_block_size: [128, 128]
BLOCK_SCALE_BYTES = 4  # an fp32 weight_scale_inv a block
NVFP4 = "nvfp4"
NVFP4_GROUP = 16  # elements along K sharing one E4M3 weight_scale
NVFP4_SCALE_BYTES = 1  # E4M3
#: Widths whose scales depend on the checkpoint's weight tensors (their count, their k x n).
TENSOR_SCALED = (*FP8_CHECKPOINTS, NVFP4)
#: Widths whose linear layers run off a GEMM table of their own (``timing.block_rates``), and the
#: tables each reads instead where a GPU has none: block-scaled fp8 per-tensor fp8's; NVFP4 none
#: (FP4 tensor cores are Blackwell's: elsewhere the roofline, said so).
OWN_GEMM = {FP8_BLOCK: (FP8,), NVFP4: ()}
#: The scale grid of a width: (rows of K, columns of N) one scale covers.
SCALE_BLOCK = {FP8_BLOCK: (BLOCK, BLOCK), NVFP4: (NVFP4_GROUP, 1)}
#: A GEMM width -> the datasheet peak it runs at: block-scaled fp8 on the fp8 tensor cores (the
#: scales are applied in the kernel's epilogue per 128-deep slice of K: DeepGEMM, TRT-LLM); NVFP4
#: on the FP4 tensor cores (Blackwell's block-scaled MMA reads the E4M3 scales itself).
PEAK_OF = {FP8_BLOCK: FP8, NVFP4: "fp4"}
HELD_MIN = 2  # bytes: what a checkpoint leaves unquantised is 16-bit at the narrowest
SCALE_BYTES = 2  # an fp16 scale per quantisation group
DEFAULT_GROUP = 128
INT_BITS = {"int8": 8, "int4": 4}
#: OCP MX v1.0 (Table 1): the element bits, the block of elements sharing one scale, the scale's bytes.
MX_BITS = {"mxfp4": 4}
MX_BLOCK = 32
MX_SCALE_BYTES = 1  # E8M0
EXPERTS_ONLY = frozenset(MX_BITS)  # widths that hold the routed experts alone


def quantises(weights_dtype: str, *, lm_head: bool, routed_expert: bool, router: bool = False) -> bool:
    """Whether `weights_dtype` holds a component's matrices below the activations' width: fp8 and
    fp8-block every linear layer's but the LM head's and the router's (ModelOpt; DeepSeek-V3's and
    Qwen3's own), nvfp4 the same (ModelOpt's NVFP4), int8/int4 every linear layer's but the LM
    head's, mxfp4 the routed experts' alone."""
    if weights_dtype in TENSOR_SCALED:
        return not (lm_head or router)
    if weights_dtype in INT_BITS:
        return not lm_head
    return weights_dtype in MX_BITS and routed_expert


def weight_bytes_of(params: int, matrices: int, weights_dtype: str, p: int, group_size: int, *,
                    lm_head: bool = False, routed_expert: bool = False, router: bool = False,
                    linears: int = 1, blocks: int = 0) -> int:
    """Bytes of one component's `params` weights, `matrices` of them linear layers' matrices in
    `linears` tensors (fp8's and nvfp4's per-tensor scales; ``linears_of``) of `blocks` scale blocks
    in all (fp8-block's 128 x 128, nvfp4's 16 along K; ``blocks_of``) (`lm_head`, `routed_expert`,
    `router`: what the component is, ``quantises``)."""
    if weights_dtype in FLOAT_WIDTHS:
        return params * DTYPE_BYTES[weights_dtype]
    quantised = matrices if quantises(weights_dtype, lm_head=lm_head, routed_expert=routed_expert,
                                      router=router) else 0
    rest = (params - quantised) * max(p, HELD_MIN)
    if weights_dtype == FP8:
        return quantised + (linears * FP8_SCALES if quantised else 0) + rest
    if weights_dtype == FP8_BLOCK:
        return quantised + (blocks * BLOCK_SCALE_BYTES if quantised else 0) + rest
    if weights_dtype == NVFP4:
        scales = blocks * NVFP4_SCALE_BYTES + linears * FP8_SCALES if quantised else 0
        return -(-quantised // 2) + scales + rest
    if weights_dtype in MX_BITS:
        scales = -(-quantised // MX_BLOCK) * MX_SCALE_BYTES
        return quantised * MX_BITS[weights_dtype] // 8 + scales + rest
    scales = -(-quantised // group_size) * SCALE_BYTES
    return quantised * INT_BITS[weights_dtype] // 8 + scales + rest


def linears_of(matrices: int, gemms: Iterable[tuple[Any, ...]], count: Callable[[Any], int] = int) -> int:
    """How many weight tensors a component's `matrices` weights are: over the first (k, n) of its
    GEMMs (``Cost.gemms``: count, m, k, n; `count` makes a size an integer) that divides them (one
    layer's projection, or one expert's), else 1."""
    for *_, k, n in gemms:
        kn = count(k) * count(n)
        if kn and matrices % kn == 0:
            return max(1, matrices // kn)
    return 1


def blocks_of(matrices: int, gemms: Iterable[tuple[Any, ...]], count: Callable[[Any], int] = int,
              block: tuple[int, int] = (BLOCK, BLOCK)) -> int:
    """How many `block`s (rows of K, columns of N: ``SCALE_BLOCK``; 128 x 128 by default) a
    component's `matrices` weights are scaled by: ceil(k / bk) x ceil(n / bn) for each of its weight
    tensors (``linears_of``'s, of the first (k, n) that divides them); else, no tensor shape known,
    ceil(matrices / (bk bn)), the fewest blocks they could be."""
    bk, bn = block
    for *_, k, n in gemms:
        k, n = count(k), count(n)
        if k * n and matrices % (k * n) == 0:
            return max(1, matrices // (k * n)) * -(-k // bk) * -(-n // bn)
    return -(-matrices // (bk * bn))


def scale_block(weights_dtype: str) -> tuple[int, int]:
    """The (K, N) extent one scale of `weights_dtype` covers (``SCALE_BLOCK``), 128 x 128 otherwise."""
    return SCALE_BLOCK.get(weights_dtype, (BLOCK, BLOCK))


def tensor_scales(matrices: int, gemms: Iterable[tuple[Any, ...]], weights_dtype: str,
                  count: Callable[[Any], int] = int) -> dict[str, int]:
    """``weight_bytes_of``'s `linears` and `blocks` of a component's `matrices` weights held at
    `weights_dtype` (``linears_of``; ``blocks_of`` at the width's ``scale_block``)."""
    gemms = tuple(gemms)
    return {"linears": linears_of(matrices, gemms, count),
            "blocks": blocks_of(matrices, gemms, count, scale_block(weights_dtype))}


@dataclass(frozen=True)
class Widths:
    """The widths of an inference pass: `weights` and `kv` default to the activations' dtype."""

    weights: str | None = None
    kv: str | None = None
    group_size: int = DEFAULT_GROUP

    def check(self, error: type[Exception] | None = None, spec: Spec | None = None) -> None:
        """One line naming the option, as the CLI spells it (an AnalysisError, or `error`); with
        `spec`, an experts-only width (mxfp4) asked of a model without routed experts too."""
        fail = error or AnalysisError
        if self.weights is not None and self.weights not in WEIGHT_DTYPES:
            raise fail(f"weights-dtype: unknown {self.weights!r}; expected one of {', '.join(WEIGHT_DTYPES)}")
        if self.kv is not None and self.kv not in DTYPE_BYTES:
            raise fail(f"kv-dtype: unknown {self.kv!r}; expected one of {', '.join(DTYPE_BYTES)}")
        if self.group_size < 1:
            raise fail(f"group-size: must be at least 1 (got {self.group_size})")
        if spec is not None and self.weights in EXPERTS_ONLY and spec.moe is None:
            raise fail(f"weights-dtype: {self.weights} holds a mixture of experts' routed experts (as "
                       f"gpt-oss's checkpoints); {spec.name[:60]} has none: use int4 or int8 for its "
                       "linear layers")

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``analysis.analyze`` that set these widths."""
        return {"weights_dtype": self.weights, "kv_dtype": self.kv, "group_size": self.group_size}

    def label(self, dtype: str) -> str:
        """' (int4 weights in groups of 128, fp8 KV cache)', ' (mxfp4 routed experts)' where a width is
        not `dtype`'s; else ''."""
        w, kv = self.weights or dtype, self.kv or dtype
        held = f"{w} routed experts" if w in EXPERTS_ONLY else f"{w} weights"
        parts = [held + (f" in groups of {self.group_size}" if w in INT_BITS else "")] * (w != dtype)
        parts += [f"{kv} KV cache"] * (kv != dtype)
        return f" ({', '.join(parts)})" if parts else ""

    def requantises(self, dtype: str) -> bool:
        """Whether the weights are held other than every parameter at `dtype`'s width: another
        width, or a quantised one (fp8 at ``--dtype fp8`` too: an FP8 checkpoint's rule)."""
        held = self.weights or dtype
        return held != dtype or held not in FLOAT_WIDTHS

    def differs(self, dtype: str) -> bool:
        """Whether weights or cache are held at another width than `dtype`'s."""
        return (self.weights or dtype) != dtype or (self.kv or dtype) != dtype
