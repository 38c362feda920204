"""config.json -> Spec: reading the file safely, unwrapping multimodal configs, and the checks every
model type shares. The per-type mapping is the family's (costmodel/hf/families/)."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costmodel.hf.family import FAMILIES, Family
from costmodel.hf.reader import (
    COMMON_IGNORED,
    EXPERT_FIELDS,
    EXPERT_TWINS,
    LM_HEADS,
    MIXTURE_OF_EXPERTS,
    UNMODELLED_MOE,
    Abort,
    Config,
    show,
)
from costmodel.spec import Spec, SpecError, spec_from_dict

# A config.json is a few kilobytes; anything much larger is not one (and must not eat memory).
MAX_CONFIG_BYTES = 10 * 2**20
MAX_DEPTH = 32  # real configs nest 3 or 4 levels (rope_parameters, text_config)

# Multimodal wrappers whose text decoder is an ordinary language model: model_type -> (the type
# of its text_config when the config names none, the wrapper class's tie_word_embeddings default,
# whether a tied text_config ties the head too). transformers 5 ties the head as the wrapper's
# tie_word_embeddings says (LlavaConfig also takes a true from text_config, for old checkpoints).
MULTIMODAL: dict[str, tuple[str, bool, bool]] = {
    "llava": ("llama", False, True), "llava_next": ("llama", False, True), "mistral3": ("mistral", True,
                                                                                        False),
    "gemma3": ("gemma3_text", True, False), "llama4": ("llama4_text", False, False),
}


# Model types a publisher names for itself whose config a transformers model type builds: the
# type read instead, and why. Moonshot's Kimi K2 configs say kimi_k2 and name the architecture
# DeepseekV3ForCausalLM; transformers' own kimi_k25 reads a kimi_k2 text_config as deepseek_v3.
ALIASES: dict[str, tuple[str, str]] = {
    "kimi_k2": ("deepseek_v3",
                "Kimi K2 is DeepseekV3ForCausalLM (transformers' kimi_k25 reads kimi_k2 as deepseek_v3)"),
}


#: Encoder-only types whose AutoModel holds BERT's pooler (BertModel, RobertaModel).
POOLED = ("bert", "roberta")


def supported() -> tuple[str, ...]:
    return tuple(FAMILIES)


@dataclass(frozen=True)
class Imported:
    """A spec's fields from a config, the model type read, and what was passed over."""

    fields: dict[str, Any]
    model_type: str
    ignored_fields: tuple[str, ...] = ()  # unknown fields, skipped (named in warnings)
    warnings: tuple[str, ...] = ()  # one line each, for stderr


def spec_fields_from_hf(data: Any, origin: str = "<config>", name: str | None = None) -> Imported:
    """The spec fields (a mapping for ``spec_from_dict``) of a config.json mapping.

    Every problem of the config is collected and raised at once, as one SpecError line.
    """
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: a config.json is a JSON object, got {type(data).__name__}")
    _check_depth(data, origin)
    warnings: list[str] = []
    model_type = data.get("model_type")
    if not isinstance(model_type, str):  # before any lookup: a list is not hashable
        raise SpecError(f"{origin}: model_type: required, one of {', '.join(FAMILIES)}")
    if model_type in MULTIMODAL and model_type not in FAMILIES:
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise SpecError(f"{origin}: text_config: {model_type} is multimodal; its text decoder's "
                            f"text_config should be an object (got {show(text)})")
        if data.get("architectures") is not None:
            _check_architectures(data["architectures"], origin, "text_config's language model")
        warnings.append(f"warning: {origin}: {model_type} is multimodal: only its text decoder (text_config) "
                        "is "
                        "counted, not the vision tower nor the projector")
        text_type, tie_default, text_ties = MULTIMODAL[model_type]
        inner = {"model_type": text_type, **text}
        inner.setdefault("_name_or_path", data.get("_name_or_path"))
        tied = data.get("tie_word_embeddings", tie_default)
        if text_ties and text.get("tie_word_embeddings") is True:
            tied = True
        inner["tie_word_embeddings"] = tied
        got = spec_fields_from_hf(inner, f"{origin}: text_config", name)
        return Imported(got.fields, got.model_type, got.ignored_fields, (*warnings, *got.warnings))
    if not isinstance(model_type, str):
        raise SpecError(f"{origin}: model_type: required, one of {', '.join(FAMILIES)}")
    source = f"{origin} (Hugging Face config, model_type {model_type})"
    if model_type in ALIASES:
        model_type, why = ALIASES[model_type]
        source = f"{source[:-1]} read as {model_type}: {why})"
    family = FAMILIES.get(model_type)
    if family is None:
        if model_type in UNMODELLED_MOE:
            field, why = UNMODELLED_MOE[model_type]
            value = f"{show(data[field])}: " if field in data else ""
            raise SpecError(f"{origin}: {field}: {value}{model_type} is not supported: {why}")
        if model_type in MIXTURE_OF_EXPERTS:
            raise SpecError(f"{origin}: model_type: {model_type} is a mixture-of-experts model whose "
                            "mapping is not written yet (docs/hf.md lists the types imported)")
        raise SpecError(f"{origin}: model_type: {show(model_type)} is not supported; "
                        f"supported: {', '.join(FAMILIES)}")
    c = Config(data, origin, model_type, family.defaults)
    out: dict[str, Any] = {"name": name or _name(data, origin), "family": model_type, "source": source}
    checks: tuple[Callable[[], object], ...] = (lambda: _check_head(c, family, warnings),
                                                lambda: family.read(c, out),
                                                lambda: _check_common(c, family, warnings))
    for check in checks:
        try:
            check()
        except Abort:
            pass
        except SpecError as e:
            c.problems.append(str(e).removeprefix(f"{origin}: "))
    ignored = []
    for key in data:
        if key in c.read or key in COMMON_IGNORED or key in family.ignored:
            continue
        twin = EXPERT_TWINS.get(key)
        if twin in c.read and key in EXPERT_FIELDS:
            # transformers 5 saves the expert count under both names (Qwen3-MoE's num_experts
            # beside num_local_experts): one the family reads, the other equal to it or refused.
            if data[key] != data.get(twin):
                c.problems.append(f"{key}: {show(data[key])} differs from {twin} {show(data.get(twin))}, "
                                  f"which transformers' {model_type} reads")
            continue
        if key in EXPERT_FIELDS and data[key] not in (None, 0, False, [], {}):
            c.problems.append(f"{key}: {show(data[key])}: a mixture-of-experts {model_type} is not supported "
                              f"(transformers' {model_type} has no experts; a mixture-of-experts "
                              "model has a model_type of its own)")
            continue
        ignored.append(key)
    if c.problems:
        raise SpecError(f"{origin}: " + "; ".join(dict.fromkeys(c.problems)))
    warnings += c.warnings
    warnings += [f"warning: {origin}: {key}: not a field transformers' {model_type} reads that this tool "
                 "knows; "
                 "ignored (docs/hf.md lists the fields known to change no cost)" for key in ignored]
    if ignored:
        out["ignored_fields"] = ignored
    return Imported(out, model_type, tuple(ignored), tuple(warnings))


def _check_depth(data: Any, origin: str) -> None:
    """Refuse absurd nesting before anything recurses into it (iteratively: no RecursionError)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SpecError(f"{origin}: nested more than {MAX_DEPTH} levels deep; a config.json nests a few")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((v, depth + 1) for v in children if isinstance(v, (dict, list)))


def _check_architectures(archs: Any, origin: str, expected: str) -> None:
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise SpecError(f"{origin}: architectures: should be a list of class names (got {show(archs)})")
    other = [a for a in archs if not a.endswith(LM_HEADS)]
    if other:
        raise SpecError(f"{origin}: architectures: {other[0][:100]} has a head other than the language-model "
                        f"head {expected}, which is not modelled")


#: The classes of an encoder-only type whose body is its AutoModel's (what is counted).
ENCODER_CLASSES = ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                   "ForQuestionAnswering", "ForMultipleChoice", "ForPreTraining")


def _check_head(c: Config, family: Family, warnings: list[str]) -> None:
    c.read.add("architectures")
    archs = c.data.get("architectures")
    if archs is None:
        return
    if not family.encoder:
        _check_architectures(archs, c.origin, family.architecture)
        return
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise SpecError(f"{c.origin}: architectures: should be a list of class names (got {show(archs)})")
    other = [a for a in archs if not a.endswith(ENCODER_CLASSES)]
    if other:
        raise SpecError(f"{c.origin}: architectures: {other[0][:100]} is not a class of {c.model_type}'s "
                        "encoder that this tool models")
    tasks = [a for a in archs if not a.endswith("Model")]
    if tasks:
        head = "pooler" if family.model_type in POOLED else "none"
        warnings.append(f"warning: {c.origin}: architectures: {tasks[0][:100]} counted as "
                        f"{family.architecture} holds it (head: {head});"
                        " --set head=mlm or head=classification counts a task head")


#: The warning of a block-scaled FP8 checkpoint's config (DeepSeek-V3/R1's, Qwen3's own FP8):
#: read as the unquantised architecture, its width one option away.
BLOCK_FP8_WARNING = ("fp8 in 128 x 128 blocks (E4M3 weights, an fp32 scale per block): parameters are "
                     "counted as elements, their bytes at --dtype; --weights-dtype fp8-block holds and "
                     "times them as the checkpoint does")


def block_scaled_fp8(quant: dict[str, Any]) -> bool:
    """Whether a config's ``quantization_config`` is block-scaled fp8 as ``precision``'s fp8-block
    holds it: {"quant_method": "fp8", "weight_block_size": [128, 128]}, E4M3 where ``fmt`` says."""
    return (quant.get("quant_method") == "fp8" and quant.get("weight_block_size") == [128, 128]
            and quant.get("fmt", "e4m3") == "e4m3")


#: The warning of an NVFP4 checkpoint's config (NVIDIA's ModelOpt ``*-FP4``): the architecture,
#: its width one option away; which modules the checkpoint leaves out is not read.
NVFP4_WARNING = ("NVFP4 (E2M1 weights, an E4M3 scale per 16 and two fp32 scales a tensor): parameters are "
                 "counted as elements, their bytes at --dtype; --weights-dtype nvfp4 holds and times them as "
                 "the checkpoint does (every linear layer but the LM head and routers; exclude_modules is "
                 "not read)")


def modelopt_nvfp4(quant: dict[str, Any]) -> bool:
    """Whether a config's ``quantization_config`` is NVFP4 as ``precision``'s nvfp4 holds it:
    ModelOpt's {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16} (vLLM's
    name for the method, ``modelopt_fp4``, too)."""
    return (quant.get("quant_algo") == "NVFP4" and quant.get("group_size", 16) == 16
            and quant.get("quant_method", "modelopt") in ("modelopt", "modelopt_fp4"))


def _check_common(c: Config, family: Family, warnings: list[str]) -> None:
    """Fields every PretrainedConfig carries that would change a cost when set."""
    quant = c.data.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if isinstance(method, str) and method in family.quantized:
        warnings.append(f"warning: {c.origin}: quantization_config: {method}: {family.quantized[method]}")
    elif isinstance(quant, dict) and block_scaled_fp8(quant):
        warnings.append(f"warning: {c.origin}: quantization_config: {BLOCK_FP8_WARNING}")
    elif isinstance(quant, dict) and modelopt_nvfp4(quant):
        warnings.append(f"warning: {c.origin}: quantization_config: {NVFP4_WARNING}")
    elif quant:
        c.problems.append("quantization_config: quantised weights are not modelled (the element type is "
                          "--dtype); "
                          "remove the field to import the unquantised architecture")
    c.read.add("quantization_config")
    if c.data.get("pruned_heads"):
        c.problems.append("pruned_heads: pruned attention heads are not modelled")
    c.read.add("pruned_heads")
    for key in ("add_cross_attention", "cross_attention_hidden_size", "tie_encoder_decoder"):
        if c.data.get(key):
            c.problems.append(f"{key}: cross-attention or shared encoder-decoder weights are not modelled "
                              "here")
        c.read.add(key)
    if c.model_type != "t5" and c.data.get("is_encoder_decoder"):
        only = "encoder" if family.encoder else "decoder"
        c.problems.append(f"is_encoder_decoder: {c.model_type} is {only}-only")
    c.read.add("is_encoder_decoder")


def _name(data: dict[str, Any], origin: str) -> str:
    """The model's name: its hub id's last part, else the folder of a config.json, else the file."""
    given = data.get("_name_or_path")
    if isinstance(given, str) and given.strip("/"):
        return given.rstrip("/").split("/")[-1][:100]
    path = Path(origin.split(": ")[0])
    if path.stem == "config" and path.resolve().parent.name:
        return path.resolve().parent.name
    return path.stem


def spec_from_hf(data: Any, origin: str = "<config>", name: str | None = None) -> Spec:
    """A Spec from a config.json mapping; SpecError (one line) for anything it cannot express."""
    return spec_from_dict(spec_fields_from_hf(data, origin, name).fields, origin)


def config_path(path: str | Path) -> Path:
    """A config.json, or a model folder holding one."""
    path = Path(path)
    if path.is_dir():
        inner = path / "config.json"
        if not inner.exists():
            raise SpecError(f"{path}: a folder without a config.json (a model folder holds one)")
        return inner
    return path


def read_config(path: str | Path) -> object:
    """A config.json's JSON: a regular file of at most 10 MiB, UTF-8 JSON, no NaN or Infinity.

    Any JSON value; spec_fields_from_hf refuses one that is not an object."""
    path = config_path(path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise SpecError(f"{path}: not a regular file (a config.json is one)")
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise SpecError(f"{path}: larger than {MAX_CONFIG_BYTES // 2**20} MiB; a config.json is a few KB")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 1]!r})") from None
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}:{e.lineno}: malformed JSON: {e.msg}") from None
    except RecursionError:
        raise SpecError(f"{path}: nested more than {MAX_DEPTH} levels deep; "
                        "a config.json nests a few") from None
    except ValueError as e:  # NaN/Infinity, or an integer past Python's 4,300-digit limit
        raise SpecError(f"{path}: {str(e).split(';')[0]}") from None
    return data


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_hf(path: str | Path, name: str | None = None, warn: Callable[[str], None] | None = None) -> Spec:
    """Read a Hugging Face config.json (or a model folder holding one) as a Spec.

    ``warn`` receives one line per field ignored and per part not counted (a vision tower).
    """
    origin = str(path)
    imported = spec_fields_from_hf(read_config(path), origin, name)
    if warn:
        for line in imported.warnings:
            warn(line)
    return spec_from_dict(imported.fields, origin)
