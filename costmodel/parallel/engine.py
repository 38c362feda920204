"""Which framework ran the step, where the framework changes it: ``--engine``.

A preset is a bundle of what one training framework does, each claim from its code (repository,
path, commit) or its paper: which collectives overlap (``Overlap``), the pipeline schedule (1F1B,
interleaved or not; the sends split over the TP ranks or whole), which kernels (``runtime.kernels``),
the training recipe's bytes, and the layouts it cannot run (``Engine.check``: one line naming
the option). Without ``--engine`` the step is what it always was: ``Overlap()`` (Megatron-LM of
June 2022's overlaps), flash kernels on a GPU, ``--recipe megatron``, every layout. An explicit
``--overlap``, ``--kernels`` or ``--recipe`` overrides the preset's; a layout the framework cannot
run is refused.

- ``megatron-2021``: Megatron-LM as Narayanan et al. 2021 ran it (the SC21 scripts' commit,
  NVIDIA/Megatron-LM@de7dc40, Aug 2021: examples/sc21/run_table_1.sh). Every TP all-reduce waits:
  the column-parallel linears' input gradients are all-reduced in the backward of
  ``copy_to_tensor_model_parallel_region`` (megatron/mpu/layers.py, mappings.py), synchronously
  (the asynchronous all-reduce came in Sept 2021, f3e57f6, and became the default in 2022); no
  sequence parallelism and no selective recompute (both Korthikanti et al. 2022); no distributed
  optimizer (2022, 329fe58); no context or expert parallelism. The gradients are fp16, all-reduced
  in fp16 (``--accumulate-allreduce-grads-in-fp32`` is off by default, megatron/arguments.py, and
  the SC21 scripts do not set it): 16 bytes a parameter. ``--DDP-impl local`` (the default)
  all-reduces them after the backward of the last micro-batch (megatron/training.py,
  ``train_step``); ``torch``'s DDP overlaps them with the backward (``--overlap dp``). Pipeline:
  1F1B and interleaved 1F1B (``--num-layers-per-virtual-pipeline-stage``), the sends split over
  the TP ranks and gathered (``--scatter-gather-tensors-in-pipeline``, on by default; Narayanan et
  al. 2021, section 4.1); PP must divide the layers (megatron/model/transformer.py, asserted).
  Kernels: fused scale-mask-softmax, ``torch.baddbmm``, bias-dropout-add fused
  (megatron/model/transformer.py, fused_softmax.py): ``megatron-2022``'s set.
- ``megatron-2022``: Megatron-LM as Korthikanti et al. 2022 ran it (NVIDIA/Megatron-LM@80389ef,
  June 2022): the column-parallel backward collectives beside their GEMMs (``tp_backward``,
  ``LinearWithGradAccumulationAndAsyncCommunication``), SP, selective recompute, the distributed
  optimizer (``--use-distributed-optimizer``: ZeRO 1 at most), fp32 main gradients (18 bytes),
  the ``megatron-2022`` kernels; PP divides the layers (megatron/mpu/initialize.py); no CP or EP.
- ``megatron-core``: Megatron-Core as its large runs set it (NVIDIA/Megatron-LM@d98e8a6, Aug
  2026, megatron/training/arguments.py, megatron/core/model_parallel_config.py): the TP
  collectives pipelined with the GEMMs (``tp_comm_overlap``, Transformer Engine's userbuffers;
  off by default, on in the recipes of large runs), the data-parallel reduce-scatter overlapped
  with the backward (``--overlap-grad-reduce``) and the distributed optimizer's all-gather with the
  next forward (``--overlap-param-gather``), the pipeline sends beside the chunks' compute in the
  interleaved schedule only (``overlap_p2p_comm``: "disabled if not using the interleaved
  schedule"), ring attention behind the core; flash attention (Transformer Engine); every layout
  here, unequal stages and ``--edge-chunks`` (``--account-for-embedding/loss-in-pipeline-split``)
  included. The expert all-to-all waits (its overlap, ``--overlap-moe-expert-parallel-comm``, is
  a schedule of its own: not modelled).
- ``deepspeed``: DeepSpeed's ``PipelineEngine`` (microsoft/DeepSpeed@38327e0, Feb 2025,
  deepspeed/runtime/pipe/) over Megatron-DeepSpeed's tensor parallelism: 1F1B (``TrainSchedule``)
  with no interleaving; each stage sends its whole output to the next (``p2p.send`` of the full
  tensor from every TP rank: no scatter/gather) and waits; the gradients are reduced once the
  pipeline drains (``ReduceTiedGrads``, ``ReduceGrads`` after the last step of the schedule), not
  overlapped; ZeRO 2 and 3 are refused with PP ("ZeRO-2 and ZeRO-3 are incompatible with
  pipeline parallelism", engine.py); the TP collectives wait (Megatron-DeepSpeed's layers as forked
  from Megatron-LM of 2021: an assumption, not read from that repository here); the
  ``megatron-2022`` kernels (Megatron's fused softmax, no flash attention, as BLOOM ran).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from costmodel.parallel import device
from costmodel.parallel.layout import Layout, LayoutError, Recompute
from costmodel.runtime import memory
from costmodel.spec import Spec


@dataclass(frozen=True)
class Overlap:
    """Which communication hides behind compute (each the most a perfect overlap would hide).

    The default is what Megatron-LM ran in Korthikanti et al. 2022 (NVIDIA/Megatron-LM of June
    2022, megatron/mpu/layers.py, ``LinearWithGradAccumulationAndAsyncCommunication``): in the
    backward of a column-parallel linear (QKV, the FFN's first), the all-reduce of the input
    gradient (the reduce-scatter under SP) is issued asynchronously and runs beside the weight-
    gradient GEMM, and SP's re-gather of the input beside the input-gradient GEMM
    (``tp_backward``); every other TP collective, the pipeline sends and the data-parallel
    reduction wait; ring attention hides its transfers behind the attention it feeds."""

    tp: bool = False  # every TP collective behind the layer's matmuls
    cp: bool = True  # ring attention's K/V transfers behind the attention core
    ep: bool = False  # expert all-to-all behind the layer's compute
    pp: bool = False  # pipeline sends behind the next micro-batch
    dp: bool = False  # gradient reduction behind the last micro-batch's backward
    tp_backward: bool = True  # Megatron-LM's asynchronous column-parallel backward collectives

    def to_dict(self) -> dict[str, bool]:
        return {"tp": self.tp, "cp": self.cp, "ep": self.ep, "pp": self.pp, "dp": self.dp,
                "tp_backward": self.tp_backward}


#: Megatron-LM of 2021's fp16 recipe (NVIDIA/Megatron-LM@de7dc40): fp16 weights and gradients
#: (``--accumulate-allreduce-grads-in-fp32`` off), fp32 master weights, Adam's fp32 m and v.
MEGATRON_2021_PRECISION = memory.TrainingPrecision(
    "fp16-mixed (Megatron 2021)", 2, 0, 2, 4, 4, 2,
    "fp16 weights and gradients, fp32 master weights and Adam states")
#: Its update, pass by pass (megatron/optimizer/optimizer.py, ``Float16OptimizerWithFloat16Params``):
#: zero the fp16 gradients (write 2); copy them into fp32 main gradients
#: (``_copy_model_grads_to_main_grads``: read 2, write 4); unscale and check (read 4, write 4);
#: the norm for clipping (read 4); Adam (28); the fp32 master into the fp16 weights (read 4, write 2).
MEGATRON_2021 = device.ParameterBytes.of("Megatron 2021", MEGATRON_2021_PRECISION,
                                         2 + (2 + 4) + (4 + 4) + 4 + (4 * 4 + 3 * 4) + (4 + 2))


@dataclass(frozen=True)
class Engine:
    """One framework's preset (the module's docstring gives each claim's source)."""

    name: str
    overlap: Overlap
    kernels: str  # a ``runtime.kernels.KERNELS`` name
    recipe: device.ParameterBytes
    summary: str
    interleave: bool = True  # the interleaved 1F1B schedule
    scatter_gather: bool = True  # pipeline sends split over the TP ranks, gathered on receipt
    pp_overlap_interleaved_only: bool = False  # the sends overlap only in the interleaved schedule
    unequal_stages: bool = True  # a PP that does not divide the layers
    edge_chunks: bool = True
    sequence_parallel: bool = True
    selective: bool = True
    context_parallel: bool = True
    expert_parallel: bool = True
    zero: int = 3  # the highest ZeRO stage
    zero_with_pp: int = 3  # the highest with a pipeline
    sources: tuple[str, ...] = field(default_factory=tuple)

    def overlap_on(self, layout: Layout) -> Overlap:
        """The preset's overlaps on `layout`."""
        if self.pp_overlap_interleaved_only and layout.interleave == 1:
            return replace(self.overlap, pp=False)
        return self.overlap

    def check(self, layout: Layout, spec: Spec) -> None:
        """Raise LayoutError naming the option `layout` asks for that this framework cannot run."""
        lo, who = layout, f"--engine {self.name}"
        layers = spec.n_layers or 0
        if lo.interleave > 1 and not self.interleave:
            raise LayoutError(f"--interleave: {who} runs 1F1B without interleaving ({self.summary})")
        if lo.edge_chunks and not self.edge_chunks:
            raise LayoutError(f"--edge-chunks: {who} splits only the layers into stages (Megatron-Core's "
                              "--account-for-embedding/loss-in-pipeline-split: --engine megatron-core)")
        if lo.pp > 1 and layers % lo.pp and not self.unequal_stages:
            raise LayoutError(f"--pp: {who} needs PP to divide the {layers} layers of {spec.name} "
                              f"(got {lo.pp})")
        if lo.sequence_parallel and not self.sequence_parallel:
            raise LayoutError(f"--sequence-parallel: {who} has no sequence parallelism (Korthikanti et al. "
                              "2022: --engine megatron-2022)")
        if lo.recompute is Recompute.selective and not self.selective:
            raise LayoutError(f"--recompute: {who} recomputes full layers only (selective: Korthikanti et "
                              "al. 2022)")
        if lo.cp > 1 and not self.context_parallel:
            raise LayoutError(f"--cp: {who} has no context parallelism (--engine megatron-core)")
        if lo.ep > 1 and not self.expert_parallel:
            raise LayoutError(f"--ep: {who} has no expert parallelism (--engine megatron-core or deepspeed)")
        most = self.zero_with_pp if lo.pp > 1 else self.zero
        if lo.zero > most:
            where = " with pipeline parallelism" if lo.pp > 1 and self.zero_with_pp < self.zero else ""
            raise LayoutError(f"--zero: {who} runs ZeRO {most} at most{where} (got {lo.zero})")


_M21 = "NVIDIA/Megatron-LM@de7dc40"
_M22 = "NVIDIA/Megatron-LM@80389ef"
_MC = "NVIDIA/Megatron-LM@d98e8a6"
_DS = "microsoft/DeepSpeed@38327e0"

ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine("megatron-2021", Overlap(tp_backward=False), "megatron-2022", MEGATRON_2021,
           "Megatron-LM of Narayanan et al. 2021: every TP all-reduce exposed, no SP, fp16 gradients",
           unequal_stages=False, edge_chunks=False, sequence_parallel=False, selective=False,
           context_parallel=False, expert_parallel=False, zero=0, zero_with_pp=0,
           sources=(f"{_M21} megatron/mpu/layers.py, mappings.py (synchronous backward all-reduce)",
                    f"{_M21} megatron/arguments.py (--DDP-impl local, --scatter-gather-tensors-in-pipeline, "
                    "--accumulate-allreduce-grads-in-fp32 off)",
                    f"{_M21} megatron/model/transformer.py (PP divides the layers; fused kernels)",
                    f"{_M21} examples/sc21/run_table_1.sh (Narayanan et al. 2021, Table 1)")),
    Engine("megatron-2022", Overlap(), "megatron-2022", device.MEGATRON,
           "Megatron-LM of Korthikanti et al. 2022: async column-parallel backward, SP, selective recompute",
           unequal_stages=False, edge_chunks=False, context_parallel=False, expert_parallel=False,
           zero=1, zero_with_pp=1,
           sources=(f"{_M22} megatron/mpu/layers.py (LinearWithGradAccumulationAndAsyncCommunication)",
                    f"{_M22} megatron/arguments.py (--sequence-parallel, --recompute-granularity, "
                    "--use-distributed-optimizer)",
                    f"{_M22} megatron/mpu/initialize.py (PP divides the layers)")),
    Engine("megatron-core", Overlap(tp=True, pp=True, dp=True), "flash", device.MEGATRON,
           "Megatron-Core with --tp-comm-overlap, --overlap-grad-reduce, --overlap-param-gather",
           pp_overlap_interleaved_only=True,
           sources=(f"{_MC} megatron/core/model_parallel_config.py (tp_comm_overlap, overlap_p2p_comm)",
                    f"{_MC} megatron/training/arguments.py (--overlap-grad-reduce, --overlap-param-gather; "
                    "overlap_p2p_comm off without the interleaved schedule)")),
    Engine("deepspeed", Overlap(tp_backward=False), "megatron-2022", device.MEGATRON,
           "DeepSpeed's PipelineEngine: 1F1B, whole-tensor sends, gradients reduced once the pipeline "
           "drains",
           interleave=False, scatter_gather=False, edge_chunks=False, context_parallel=False, zero_with_pp=1,
           sources=(f"{_DS} deepspeed/runtime/pipe/schedule.py (TrainSchedule: ReduceGrads at the end)",
                    f"{_DS} deepspeed/runtime/pipe/engine.py (ZeRO-2/3 refused with PP; p2p.send of the "
                    "whole output)")),
)}
