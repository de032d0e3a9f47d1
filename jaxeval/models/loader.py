"""`load_model`: a Hugging Face safetensors checkpoint -> (`ModelSpec`, params placed on a mesh).

Each parameter is created with `jax.make_array_from_callback(shape, sharding, callback)`: the
callback receives the global index of one device's shard and returns just that piece, read from the
checkpoint (a row range of the embedding; for stacked [L, ...] leaves, the layers in range, each
read and converted from its HF layout into one preallocated shard buffer). The host holds at most one
shard of one parameter plus one layer's tensor at a time, never a second copy of the model.

    load_model("/ckpt/llama", mesh=make_mesh("data_model"), dtype="bfloat16")
      -> LoadedModel(spec=ModelSpec(model_type="llama", ...), params={...}, hf_config, path, mesh)
    load_model("/ckpt", gguf_file="smollm2.Q4_1.gguf")   # or load_model("/ckpt/smollm2.Q4_1.gguf")

A GGUF file goes through the same path: `jaxeval.models.weights.gguf.GGUFCheckpoint` answers HF tensor
names with dequantized rows, so each shard is still read (and dequantized) on its own.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import jax
import ml_dtypes
import numpy as np
from jax.sharding import Mesh

from jaxeval.errors import JaxevalError
from jaxeval.models.families import FAMILIES, SUPPORTED_MODEL_TYPES, Family
from jaxeval.models.families.config import text_config
from jaxeval.models.params import ParamInfo, is_info, param_layout
from jaxeval.models.runtime import Runtime, make_runtime
from jaxeval.models.sharding import logical_sharding
from jaxeval.models.spec import ModelSpec
from jaxeval.models.weights import bounds, gguf
from jaxeval.models.weights.checkpoint import CheckpointReader
from jaxeval.models.weights.gguf_file import GGUFFile
from jaxeval.models.weights.hf import Source
from jaxeval.models.weights.mxfp4 import with_mxfp4
from jaxeval.platform.mesh import single_device_mesh

STORAGE_DTYPES: dict[str, Any] = {
    "float32": np.float32,
    "bfloat16": ml_dtypes.bfloat16,
    "float16": np.float16,
}
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class LoadedModel:
    """A loaded model: static spec, params on `mesh`, the transformers config, the local path.

    `gguf_file` is the GGUF file the weights came from (None for safetensors); `path` is then the
    file itself, and the tokenizer is read from it too. `runtime` is how the model runs on `mesh`
    (`jaxeval.models.runtime`: the attention and expert backends), a static argument of every
    kernel beside `spec`.
    """

    spec: ModelSpec
    params: Any
    hf_config: Any
    path: str
    mesh: Mesh
    gguf_file: str | None = None
    runtime: Runtime | None = None  # None: the reference backends on `mesh`

    def __post_init__(self):
        if self.runtime is None:
            object.__setattr__(self, "runtime", Runtime(mesh=self.mesh))
        elif self.runtime.mesh is not self.mesh and self.runtime.mesh != self.mesh:
            raise ValueError("LoadedModel: the runtime's mesh is not the model's mesh")


def _check_dtype_name(name: Any, *, what: str) -> str:
    """`name` with its alias resolved ("bf16" -> "bfloat16"), or "auto"; checked before any file
    is opened, so that a misspelt dtype fails at once, naming the argument."""
    name = _DTYPE_ALIASES.get(name, name) if isinstance(name, str) else name
    if name != "auto" and name not in STORAGE_DTYPES:
        raise JaxevalError(
            f"unknown {what} {name!r}",
            field=what,
            hint=f"use one of {', '.join(STORAGE_DTYPES)} or 'auto' (the checkpoint's own)",
        )
    return name


def dtype_name(name: str | None, raw_config: dict[str, Any], *, what: str) -> str:
    """The storage or compute dtype `name` stands for (`auto`: the checkpoint's own, else float32);
    a named error for a dtype jaxeval does not compute in."""
    name = _check_dtype_name(name, what=what)
    if name == "auto":
        saved = raw_config.get("dtype") or raw_config.get("torch_dtype") or "float32"
        name = saved if saved in STORAGE_DTYPES else "float32"
    return name


def resolve_path(pretrained: str, revision: str | None = None) -> str:
    """A local directory as is; otherwise a hub id looked up in the local Hugging Face cache."""
    if os.path.isdir(pretrained):
        return os.path.abspath(pretrained)
    try:
        from huggingface_hub import snapshot_download

        patterns = ["*.json", "*.safetensors", "*.model", "*.txt"]
        try:
            return snapshot_download(
                pretrained, revision=revision, allow_patterns=patterns, local_files_only=True
            )
        except Exception:
            if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
                raise
            return snapshot_download(pretrained, revision=revision, allow_patterns=patterns)
    except Exception as err:
        raise JaxevalError(
            f"model {pretrained!r} is neither a local directory nor available from the Hugging Face hub"
            f" cache ({type(err).__name__})",
            hint="pass a directory holding config.json and *.safetensors, or download the model first",
        ) from err


def read_hf_config(path: str, *, trust_remote_code: bool = False) -> Any:
    """transformers' config object of the directory `path`, from a config.json that is a JSON
    object whose sizes are within `bounds.CAPS` (checked first: transformers builds per-layer lists
    from them); a value transformers refuses is a named error."""
    bounds.read_config_json(path)
    return _transformers_config(path, trust_remote_code)


def _transformers_config(path: str, trust_remote_code: bool) -> Any:
    """transformers' config object of `path`; a value it refuses is a named error."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as e:  # any value transformers refuses (its own validators' errors too)
        raise JaxevalError(
            f"transformers cannot read this config.json ({type(e).__name__}: {e})",
            file=os.path.join(path, "config.json"),
            hint="download the model's config.json again, or fix the value it names",
        ) from None


def _check_weights_hold(cfg: Any, raw: dict[str, Any], family: Family, reader: Any, path: str):
    """The layers, experts, vocabulary and width that config.json declares are present among the
    checkpoint's tensors (their names and shapes; no weight is read): `bounds.check_counts`."""
    if family.text_config:
        cfg, raw, prefix = text_config(cfg), raw.get("text_config") or {}, "text_config."
    else:
        prefix = ""

    def declared(value_name: str, *spellings: str) -> tuple[str, Any]:
        field = next((s for s in spellings if s in raw), spellings[0])
        return prefix + field, getattr(cfg, value_name, None)

    counts = {
        "layers": declared("num_hidden_layers", "num_hidden_layers", "n_layer", "num_layers"),
        "vocab": declared("vocab_size", "vocab_size"),
        "width": declared("hidden_size", "hidden_size", "n_embd"),
    }
    experts = getattr(family.options, "experts", None)
    if experts is not None:
        counts["experts"] = declared(experts.count, experts.count)
    found = bounds.on_disk(reader.names, reader.shape)
    bounds.check_counts(
        counts,
        found,
        file=os.path.join(path, "config.json"),
        weights="the checkpoint's tensors",
        hint="the config does not match the weights beside it: use the config.json that came "
        "with these weights, or download the checkpoint again",
    )


def _check_supported(raw: dict[str, Any], path: str, trust_remote_code: bool) -> str:
    if raw.get("auto_map") and not trust_remote_code:
        raise JaxevalError(
            "this model's config.json has an auto_map (custom code) and trust_remote_code is off",
            file=path,
            hint="pass trust_remote_code=True only if you trust the repository's code",
        )
    model_type = raw.get("model_type")
    if model_type not in FAMILIES:
        raise JaxevalError(
            f"model_type {model_type!r} is not supported",
            file=path,
            hint=f"supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}",
        )
    return model_type


def _resolve_keys(
    reader: CheckpointReader, family: Family, sources: Any, layout: Any, spec: ModelSpec, path: str
) -> Any:
    """Replaces each Source key by the name actually present (trying the family's aliases)."""

    def resolve(name: str) -> str:
        if name in reader:
            return name
        for old, new in family.aliases:
            if name.startswith(old) and new + name[len(old) :] in reader:
                return new + name[len(old) :]
        raise JaxevalError(
            f"tensor {name!r} is missing from the checkpoint",
            file=path,
            hint=f"check that the weights match config.json (model_type {spec.model_type!r})",
        )

    def fix(info: ParamInfo, source: Source) -> Source:
        if "{i}" not in source.key:
            return dataclasses.replace(source, key=resolve(source.key))
        layers = range(source.first_layer, source.first_layer + info.shape[0])
        experts = range(info.shape[1]) if "{e}" in source.key else range(1)
        first = resolve(source.key.format(i=layers[0], e=0))
        prefix = source.key.split("{i}")[0]  # the alias replaces the part before the layer
        new_prefix = first[: len(first) - len(source.key.format(i=layers[0], e=0)) + len(prefix)]
        template = new_prefix + source.key[len(prefix) :]
        for i in layers:  # every layer's (and expert's) tensor is there under the same spelling
            for e in experts:
                name = template.format(i=i, e=e)
                if name not in reader:
                    resolve(source.key.format(i=i, e=e))  # raises: missing
                    raise JaxevalError(f"inconsistent layer tensor names for {name!r}", file=path)
        return dataclasses.replace(source, key=template)

    return jax.tree.map(fix, layout, sources, is_leaf=is_info)


def _check_sizes(reader: CheckpointReader, sources: Any, layout: Any, path: str) -> None:
    """Each parameter's first tensor holds at least the values its declared shape needs (a
    conversion only reorders or selects), checked before any weight is read: a head count, head
    width or MLP width larger than the weights fails here, naming the tensor."""

    def check(where: Any, info: ParamInfo, source: Source) -> None:
        shape = info.shape[1:] if info.axes[0] == "layers" else info.shape
        if "{e}" in source.key:
            shape = shape[1:]
        key = source.key.format(i=source.first_layer, e=0)
        stored = tuple(reader.shape(key))
        if math.prod(shape) > math.prod(stored):
            name = jax.tree_util.keystr(where, simple=True, separator=".")
            raise JaxevalError(
                f"parameter {name!r} is {shape} by the config's sizes, but its tensor {key!r} "
                f"is only {stored}",
                file=path,
                hint="the config's head counts or widths (num_attention_heads, "
                "num_key_value_heads, head_dim, intermediate_size) do not match the weights: use "
                "the config.json that came with them (a GGUF file: download it again)",
            )

    jax.tree_util.tree_map_with_path(check, layout, sources, is_leaf=is_info)


def _load_leaf(
    reader: CheckpointReader, info: ParamInfo, source: Source, sharding: Any, dtype: Any, path: str
) -> jax.Array:
    stacked = info.axes[0] == "layers"
    expected = tuple(info.shape[1:] if stacked else info.shape)

    def piece(key: str, index: tuple[slice, ...]) -> np.ndarray:
        if source.convert is None:  # same layout: read only the rows this shard needs
            if reader.shape(key) != expected:
                raise JaxevalError(
                    f"tensor {key!r} has shape {reader.shape(key)}, expected {expected}", file=path
                )
            rows = index[0] if index else None
            return reader.read(key, rows)[(slice(None), *index[1:])] if index else reader.read(key)
        w = reader.read(key)
        try:
            full = source.convert(w)
        except ValueError:  # a reshape that cannot fit: the tensor has the wrong size
            full = None
        if full is None or tuple(full.shape) != expected:
            raise JaxevalError(
                f"tensor {key!r} has shape {reader.shape(key)}, which does not convert to the "
                f"expected {expected}",
                file=path,
                hint="check that the weights match config.json",
            )
        return full[index]

    def expert_piece(i: int, index: tuple[slice, ...]) -> np.ndarray:
        """Layer i's experts in index[0] (one tensor each), the rest of `index` applied."""
        experts = range(expected[0])[index[0]]
        out = None
        for j, e in enumerate(experts):
            w = reader.read(source.key.format(i=i, e=e))
            full = w if source.convert is None else source.convert(w)
            if tuple(full.shape) != expected[1:]:
                raise JaxevalError(
                    f"tensor {source.key.format(i=i, e=e)!r} has shape {w.shape}, which does not "
                    f"convert to the expected {expected[1:]}",
                    file=path,
                    hint="check that the weights match config.json",
                )
            part = full[index[1:]]
            if out is None:
                out = np.empty((len(experts), *part.shape), dtype)
            out[j] = part
        return out

    def callback(index: tuple[slice, ...]) -> np.ndarray:
        index = tuple(index)
        if not stacked:
            return np.asarray(piece(source.key, index), dtype=dtype)
        layers = range(source.first_layer, source.first_layer + info.shape[0])[index[0]]
        out = None
        into = getattr(source.convert, "into", None)
        whole = all(s.indices(n) == (0, n, 1) for s, n in zip(index[1:], expected, strict=True))
        for j, i in enumerate(layers):  # fill one preallocated shard, one layer at a time
            if "{e}" in source.key:
                part = expert_piece(i, index[1:])
                if out is None:
                    out = np.empty((len(layers), *part.shape), dtype)
                out[j] = part
                continue
            key = source.key.format(i=i)
            if into is not None and whole and out is not None and into(reader.read(key), out[j]):
                continue  # converted in place: no temporary copy (else checked below)
            part = piece(key, index[1:])
            if out is None:
                out = np.empty((len(layers), *part.shape), dtype)
            out[j] = part
        return out

    return jax.make_array_from_callback(info.shape, sharding, callback)


def _gguf_float_dtype(f: GGUFFile) -> str:
    """'auto' for a GGUF file: its half type if it holds only plain floats, else float32."""
    names = {f.type_name(name) for name in f.tensors}
    if names <= {"F32", "F16", "BF16"}:
        return "bfloat16" if "BF16" in names else "float16" if "F16" in names else "float32"
    return "float32"


def _open_checkpoint(
    pretrained: str, gguf_file: str | None, revision: str | None, trust_remote_code: bool
) -> tuple[str, dict[str, Any], Any, Any, str | None]:
    """(path, raw config dict, transformers config, tensor reader, gguf path or None)."""
    gguf_path = gguf.resolve_gguf_path(pretrained, gguf_file)
    if gguf_path is not None:
        f = GGUFFile(gguf_path)
        hf_config = gguf.load_config(f)
        _check_supported({"model_type": hf_config.model_type}, gguf_path, trust_remote_code)
        raw = {"model_type": hf_config.model_type, "dtype": _gguf_float_dtype(f)}
        return gguf_path, raw, hf_config, gguf.GGUFCheckpoint(f, hf_config), gguf_path
    path = resolve_path(pretrained, revision)
    raw = bounds.read_config_json(path)  # a named error when corrupt; sizes within the caps
    model_type = _check_supported(raw, path, trust_remote_code)
    hf_config = _transformers_config(path, trust_remote_code)
    reader = with_mxfp4(CheckpointReader(path))
    _check_weights_hold(hf_config, raw, FAMILIES[model_type], reader, path)
    return path, raw, hf_config, reader, None


def load_model(
    pretrained: str,
    *,
    mesh: Mesh | None = None,
    dtype: str = "float32",
    compute_dtype: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    gguf_file: str | None = None,
    attention: str | None = "xla",
) -> LoadedModel:
    """Loads a supported HF checkpoint (safetensors, or a GGUF file) onto `mesh` (one device when None).

    `dtype` is the storage dtype of the params (float32, bfloat16, float16 or 'auto' = the
    checkpoint's), `compute_dtype` the activations' dtype (defaults to `dtype`). `gguf_file` names a
    GGUF file inside the `pretrained` directory (lm-eval's HF argument); `pretrained` may also be
    the path of a `.gguf` file. `attention` chooses the runtime's attention backend for `mesh`
    (`attention.select_attention`: "auto", "cpu", or "xla", the reference, by default;
    None reads `JAXEVAL_ATTENTION`); `JaxLM` makes its own runtime for the model it runs.
    """
    _check_dtype_name(dtype, what="dtype")
    if compute_dtype:
        _check_dtype_name(compute_dtype, what="compute_dtype")
    path, raw, hf_config, reader, gguf_path = _open_checkpoint(
        pretrained, gguf_file, revision, trust_remote_code
    )
    model_type = raw["model_type"]
    storage = dtype_name(dtype, raw, what="dtype")
    compute = dtype_name(compute_dtype, raw, what="compute_dtype") if compute_dtype else storage

    family = FAMILIES[model_type]
    mesh = single_device_mesh() if mesh is None else mesh
    spec = family.build(hf_config, compute)

    layout = param_layout(spec)
    sources = family.weights(spec)
    if jax.tree.structure(layout, is_leaf=is_info) != jax.tree.structure(
        sources, is_leaf=lambda x: isinstance(x, Source)
    ):
        raise AssertionError(f"weight map of {model_type} does not match its parameter layout")
    sources = _resolve_keys(reader, family, sources, layout, spec, path)
    _check_sizes(reader, sources, layout, path)

    np_dtype = STORAGE_DTYPES[storage]

    def load(info: ParamInfo, source: Source) -> jax.Array:
        sharding = logical_sharding(mesh, info.axes, info.shape)
        return _load_leaf(reader, info, source, sharding, np_dtype, path)

    params = jax.tree.map(load, layout, sources, is_leaf=is_info)
    return LoadedModel(
        spec=spec,
        params=params,
        hf_config=hf_config,
        path=path,
        mesh=mesh,
        gguf_file=gguf_path,
        runtime=make_runtime(mesh, attention),
    )
