"""A GGUF checkpoint as a Hugging Face one: transformers config, tokenizer and HF-named tensors.

lm-eval's HF backend loads GGUF through transformers (`pretrained=DIR,gguf_file=NAME.gguf`), which
needs torch. Here the same three things come from the file without torch:

- **config**: the file's metadata renamed with transformers' own GGUF key table
  (`GGUF_CONFIG_MAPPING`), the same rules transformers applies (mistral detection, tied embeddings
  when there is no `output.weight`, vocabulary size from the token list, Gemma-3 -> `gemma3_text`),
  plus the expert sizes and windows llama.cpp writes for MoE files that the table misses, then
  `AutoConfig.for_model`;
- **tokenizer**: transformers' GGUF tokenizer converter on the file's vocabulary and merges,
  wrapped as a fast tokenizer with the file's special tokens and chat template
  (`gguf_tokenizer.load_tokenizer`, re-exported here);
- **tensors**: `GGUFCheckpoint` answers HF tensor names (`model.layers.3.self_attn.q_proj.weight`)
  from GGUF ones (`blk.3.attn_q.weight`, via the `gguf` package's name map) and undoes llama.cpp's
  conversions, so the safetensors loader reads it unchanged:

      llama/mistral q, k  rows permuted per head: [h, 2, E/2] -> [h, E/2, 2] on export; undone here
      gemma2/3 norms      stored as 1 + w; undone (w = stored - 1)
      gpt2 Linear-like    stored [out, in]; HF Conv1D wants [in, out]: transposed back

Mixture-of-Experts files (qwen2moe, qwen3moe, gpt-oss) stack each layer's experts in one tensor,
which is answered per expert, or reassembled into gpt-oss's fused HF tensors (details in
`GGUFCheckpoint`):

      blk.3.ffn_gate_exps.weight [X, F, D]  ->  model.layers.3.mlp.experts.5.gate_proj.weight [F, D]
      blk.3.ffn_gate_exps / ffn_up_exps     ->  gpt-oss experts.gate_up_proj [X, D, 2F], columns
                                                 interleaved: gate 0, up 0, gate 1, up 1, ...
      blk.3.ffn_down_exps.weight [X, D, F]  ->  gpt-oss experts.down_proj [X, F, D]
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxeval.errors import JaxevalError
from jaxeval.models.weights import bounds
from jaxeval.models.weights import hf as hf_weights
from jaxeval.models.weights.gguf_file import GGUFFile
from jaxeval.models.weights.gguf_tokenizer import load_tokenizer as load_tokenizer  # re-exported

# GGUF `general.architecture` -> the transformers model_type we build from it (our families).
GGUF_ARCHITECTURES = {
    "llama": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "phi3": "phi3",
    "gpt2": "gpt2",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
    "qwen2moe": "qwen2_moe",
    "qwen3moe": "qwen3_moe",
    "gpt-oss": "gpt_oss",
}
# GGUF architecture -> the name transformers' GGUF tables use for it (others: the same name).
_TABLE_NAMES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss"}
# Metadata llama.cpp writes that transformers' table leaves out, needed to build the right model:
# without them the experts get the config class's default sizes (Qwen2-MoE: 1408 and 5632).
_EXTRA_CONFIG_KEYS = {
    "qwen2_moe": {
        "expert_feed_forward_length": "moe_intermediate_size",
        "expert_shared_feed_forward_length": "shared_expert_intermediate_size",
    },
    "qwen3_moe": {"expert_feed_forward_length": "moe_intermediate_size"},
    # transformers' gpt_oss table expects `sliding_window`; llama.cpp writes `attention.sliding_window`
    "gpt_oss": {"attention.key_length": "head_dim", "attention.sliding_window": "sliding_window"},
}


def resolve_gguf_path(pretrained: str, gguf_file: str | None) -> str | None:
    """The GGUF file to load, or None for a safetensors checkpoint.

    resolve_gguf_path("/m", "x.gguf") -> "/m/x.gguf";  resolve_gguf_path("/m/x.gguf", None) -> same
    """
    if gguf_file:
        path = gguf_file if os.path.isabs(gguf_file) else os.path.join(pretrained, gguf_file)
        if not os.path.isfile(path):
            raise JaxevalError(
                f"gguf_file {gguf_file!r} not found in {pretrained!r}",
                field="gguf_file",
                hint="pretrained=DIR names the folder and gguf_file=NAME.gguf the file inside it "
                "(or pass pretrained=/path/to/model.gguf)",
            )
        return os.path.abspath(path)
    if pretrained.endswith(".gguf"):
        if not os.path.isfile(pretrained):
            raise JaxevalError(
                "GGUF file not found", file=pretrained, hint="check the path to the .gguf file"
            )
        return os.path.abspath(pretrained)
    return None


def _has_experts(arch: str) -> bool:
    """Whether llama.cpp's tensor list for `arch` has stacked expert tensors (a Mixture of Experts)."""
    import gguf

    arch_id = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}.get(arch)
    return arch_id is not None and gguf.MODEL_TENSOR.FFN_GATE_EXP in gguf.MODEL_TENSORS[arch_id]


def gguf_architecture(f: GGUFFile) -> str:
    """The model_type a file's architecture maps to; a clear error when it maps to none of ours."""
    arch = f.architecture
    moe_archs = ", ".join(a for a in GGUF_ARCHITECTURES if a in _TABLE_NAMES)
    use_safetensors = (
        "load this model from its safetensors checkpoint (pretrained=DIR holding config.json and "
        f"*.safetensors); Mixture-of-Experts GGUF files load for: {moe_archs}"
    )
    experts = f.metadata.get(f"{arch}.expert_count")
    if arch in GGUF_ARCHITECTURES and experts and arch not in _TABLE_NAMES:
        raise JaxevalError(  # e.g. Mixtral, which llama.cpp exports as 'llama' with experts
            f"this {arch!r} GGUF file holds a Mixture of Experts ({experts} experts), which "
            f"transformers' {arch!r} GGUF config does not describe",
            file=f.path,
            hint=use_safetensors,
        )
    if arch not in GGUF_ARCHITECTURES and _has_experts(arch):
        raise JaxevalError(
            f"GGUF architecture {arch!r} is a Mixture of Experts that transformers has no GGUF "
            "config table for, so its config cannot be read from the file",
            file=f.path,
            hint=use_safetensors,
        )
    if arch not in GGUF_ARCHITECTURES:
        raise JaxevalError(
            f"GGUF architecture {arch!r} is not supported",
            file=f.path,
            hint=f"supported GGUF architectures: {', '.join(GGUF_ARCHITECTURES)} "
            "(other families load from safetensors checkpoints)",
        )
    return arch


def config_dict(f: GGUFFile) -> dict[str, Any]:
    """The transformers config dict for this file, renamed exactly as transformers does, plus the
    MoE keys its table misses (`_EXTRA_CONFIG_KEYS`) and gpt-oss's yarn parameters; its sizes
    within `bounds.CAPS` (an error names the GGUF key)."""
    config, origin = _config_and_origin(f)
    bounds.check_config_dict(config, file=f.path, shown=lambda key: origin.get(key, key))
    return config


def _config_and_origin(f: GGUFFile) -> tuple[dict[str, Any], dict[str, str]]:
    """(`config_dict`'s dict, transformers key -> the GGUF key it was read from)."""
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    arch = gguf_architecture(f)
    name = f.metadata.get("general.name")
    # transformers compares the name as a one-element list, so only the exact name "mistral" counts
    updated = "mistral" if "llama" in arch and name == "mistral" else _TABLE_NAMES.get(arch, arch)
    extra = _EXTRA_CONFIG_KEYS.get(updated, {})
    config: dict[str, Any] = {
        "tie_word_embeddings": "output.weight" not in f.tensors,
    }
    origin: dict[str, str] = {}
    for key, value in (GGUF_CONFIG_DEFAULTS_MAPPING.get(updated) or {}).items():
        config.setdefault(key, value)
    for gguf_key, value in f.metadata.items():
        key = gguf_key.replace(arch, updated)
        prefix, _, rest = key.partition(".")
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, str) and arch in value:
            value = value.replace(arch, updated)
        renamed = GGUF_CONFIG_MAPPING.get(prefix, {}).get(rest)
        if renamed is None and prefix == updated:
            renamed = extra.get(rest)
        if renamed is not None and renamed != -1:
            config[renamed] = value
            origin[renamed] = gguf_key
    if updated == "gpt_oss":
        _gpt_oss_rope(f.metadata, arch, config)
    if config.get("model_type") == "gpt2" and "n_ctx" in config:
        # GGUF's context_length is GPT-2's position table; transformers' table maps it only to n_ctx,
        # which leaves n_positions at 1024 and breaks any file with another table size.
        config.setdefault("n_positions", config["n_ctx"])
    if config.get("model_type") == "gemma3":
        config["model_type"] = "gemma3_text"
    if "vocab_size" not in config and "tokenizer.ggml.tokens" in f.metadata:
        config["vocab_size"] = len(f.metadata["tokenizer.ggml.tokens"])
        origin["vocab_size"] = "tokenizer.ggml.tokens"
    return config, origin


def _gpt_oss_rope(meta: dict[str, Any], arch: str, config: dict[str, Any]) -> None:
    """gpt-oss's yarn `rope_parameters` from the file's `rope.scaling.*` keys (llama.cpp writes them
    for every gpt-oss file; without them the config class's defaults stand).

    `truncate` has no GGUF key: False, as in every gpt-oss checkpoint's config.
    """
    key = f"{arch}.rope.scaling."
    if meta.get(key + "type") != "yarn":
        return
    params: dict[str, Any] = {"rope_type": "yarn", "truncate": False}
    for gguf_key, hf_key in (
        ("factor", "factor"),
        ("original_context_length", "original_max_position_embeddings"),
        ("yarn_beta_fast", "beta_fast"),
        ("yarn_beta_slow", "beta_slow"),
        ("yarn_attn_factor", "attention_factor"),
    ):
        if key + gguf_key in meta:
            params[hf_key] = meta[key + gguf_key]
    if "rope_theta" in config:
        params["rope_theta"] = config["rope_theta"]
    config["rope_parameters"] = params


def load_config(f: GGUFFile) -> Any:
    """transformers' config object for the file (`config_dict`), whose layers, experts, vocabulary
    and width the file's tensor infos must hold (`bounds.check_counts`)."""
    from transformers import AutoConfig

    config, origin = _config_and_origin(f)
    shown = lambda key: origin.get(key, key)  # noqa: E731
    bounds.check_config_dict(config, file=f.path, shown=shown)
    model_type = config.pop("model_type")
    try:
        cfg = AutoConfig.for_model(model_type, **config)
    except Exception as e:  # any value transformers refuses (its own validators' errors too)
        raise JaxevalError(
            f"transformers cannot build a {model_type!r} config from this file's metadata "
            f"({type(e).__name__}: {e})",
            file=f.path,
            hint="the file's metadata is corrupt: download it again, or rewrite it with llama.cpp",
        ) from None
    layers, width = ("n_layer", "n_embd") if model_type == "gpt2" else ("num_hidden_layers", "")
    declared = {
        "layers": (shown(layers), getattr(cfg, "num_hidden_layers", None)),
        "vocab": (shown("vocab_size"), getattr(cfg, "vocab_size", None)),
        "width": (shown(width or "hidden_size"), getattr(cfg, "hidden_size", None)),
    }
    experts = next((k for k in ("num_experts", "num_local_experts") if k in config), None)
    if experts is not None:
        declared["experts"] = (shown(experts), getattr(cfg, experts, None))
    found = bounds.on_disk(f.tensors, f.shape)
    bounds.check_counts(
        declared,
        found,
        file=f.path,
        weights="the file's tensors",
        hint="the file's metadata does not match its tensors: the file is corrupt; download it "
        "again",
    )
    return cfg


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k export permutation undone.

    Export (`convert_hf_to_gguf.py`) viewed each head's E rows as [2, E/2] and stored them as
    [E/2, 2] (rotate-half order -> interleaved pairs); here each head's rows are viewed as [E/2, 2]
    and put back as [2, E/2]. Head rows 0..3 (E = 4): HF [0 1 2 3] -> GGUF [0 2 1 3] -> HF [0 1 2 3].
    """
    dim = w.shape[0] // heads // 2
    return w.reshape(heads, dim, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@dataclasses.dataclass(frozen=True)
class _Tensor:
    """How one HF tensor is answered: its HF shape and a reader of its rows (None: all)."""

    shape: tuple[int, ...]
    read: Callable[[slice | None], np.ndarray]


EXPERT_CACHE_BYTES = 1 << 30  # float32 experts of one stacked tensor kept dequantized (1 GiB)
_EXPERT = re.compile(r"(?P<pre>.+\.experts)\.(?P<e>\d+)\.(?P<proj>gate|up|down)_proj\.weight")
_FUSED_EXPERTS = re.compile(r"(?P<pre>.+\.experts)\.(?P<proj>gate_up|down)_proj(?P<bias>_bias)?")
_GATE_EXPS, _GATE_UP_EXPS = "ffn_gate_exps", "ffn_gate_up_exps"  # llama.cpp's tensor names


def _interleave(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """gate, up [n, F, D] (torch Linear rows per expert) -> gpt-oss gate_up_proj [n, D, 2F].

    Column 2j is gate row j, column 2j + 1 up row j:  gate [[a], [b]], up [[c], [d]] -> [[a c b d]].
    """
    n, f, d = gate.shape
    out = np.empty((n, d, 2 * f), np.float32)
    for x in range(n):  # rows g0 u0 g1 u1 ..., then transposed strip by strip
        hf_weights.transpose(np.stack((gate[x], up[x]), axis=1).reshape(2 * f, d), out=out[x])
    return out


def _swap_experts(w: np.ndarray) -> np.ndarray:
    """[n, a, b] -> [n, b, a], each expert transposed strip by strip."""
    out = np.empty((w.shape[0], w.shape[2], w.shape[1]), np.float32)
    for x in range(w.shape[0]):
        hf_weights.transpose(w[x], out=out[x])
    return out


class GGUFCheckpoint:
    """`CheckpointReader`'s interface (`in`, `shape`, `read`) over a GGUF file, by HF tensor name.

    Experts (qwen2moe, qwen3moe): `experts.{e}.{gate,up,down}_proj.weight` is expert e of the
    layer's `ffn_{gate,up,down}_exps` [X, F, D] / [X, D, F] (gate and up may also come fused, rows
    [gate | up] of `ffn_gate_up_exps` [X, 2F, D]). The loader reads a layer's experts one by one, so
    a run of up to `expert_cache_bytes` of a stacked tensor's experts is dequantized on the first read
    and kept (one run at a time): a layer's X reads dequantize it once.

    gpt-oss's HF tensors are fused over experts and assembled from the same GGUF tensors:
    `gate_up_proj` [X, D, 2F] (gate/up columns interleaved), `gate_up_proj_bias` [X, 2F] (likewise),
    `down_proj` [X, F, D] (each expert's `ffn_down_exps` transposed), `down_proj_bias` [X, D].
    Tensors HF names without a suffix (`self_attn.sinks`) carry `.weight` in the file.
    """

    _GPT2_TRANSPOSED = ("attn_qkv.weight", "ffn_down.weight", "ffn_up.weight", "attn_output.weight")

    def __init__(
        self, f: GGUFFile, hf_config: Any, *, expert_cache_bytes: int = EXPERT_CACHE_BYTES
    ):
        import gguf

        self.file, self.path = f, f.path
        f.check_types()
        arch = f.architecture
        arch_id = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch]
        self._names = gguf.get_tensor_name_map(arch_id, int(hf_config.num_hidden_layers))
        self._arch = arch
        self._heads = int(hf_config.num_attention_heads)
        self._kv_heads = int(getattr(hf_config, "num_key_value_heads", None) or self._heads)
        self._cache_bytes = expert_cache_bytes
        self._tensors: dict[str, _Tensor | None] = {}
        self._run: tuple[str, int, np.ndarray] | None = None  # (GGUF name, first expert, values)

    def gguf_name(self, hf_name: str) -> str | None:
        base, dot, suffix = hf_name.rpartition(".")
        if not dot:
            return None
        found = self._names.get_name(base)
        if found is None:
            return None
        name = f"{found}.{suffix}"
        return name if name in self.file else None

    def __contains__(self, hf_name: str) -> bool:
        return self._tensor(hf_name) is not None

    def shape(self, hf_name: str) -> tuple[int, ...]:
        tensor = self._tensor(hf_name)
        if tensor is None:
            raise KeyError(hf_name)
        return tensor.shape

    def read(self, hf_name: str, rows: slice | None = None) -> np.ndarray:
        """The HF-layout float32 tensor (or rows `rows`), llama.cpp's export conversions undone."""
        tensor = self._tensor(hf_name)
        if tensor is None:
            raise KeyError(hf_name)
        return tensor.read(rows)

    def _tensor(self, hf_name: str) -> _Tensor | None:
        if hf_name not in self._tensors:
            found = None
            for find in (self._expert, self._fused_experts, self._plain, self._unsuffixed):
                found = find(hf_name)
                if found is not None:
                    break
            self._tensors[hf_name] = found
        return self._tensors[hf_name]

    def _stacked(self, hf_base: str, suffix: str = ".weight") -> str | None:
        """The GGUF tensor for an HF module name (`...experts.gate_proj`), if the file has it."""
        found = self._names.get_name(hf_base)
        return found + suffix if found is not None and found + suffix in self.file else None

    def _fused_gate_up(self, pre: str, suffix: str = ".weight") -> str | None:
        gate = self._names.get_name(f"{pre}.gate_proj")
        fused = gate.replace(_GATE_EXPS, _GATE_UP_EXPS) + suffix if gate else None
        return fused if fused in self.file else None

    def _transposed(self, name: str) -> bool:
        return self._arch == "gpt2" and name.endswith(self._GPT2_TRANSPOSED)

    def _plain(self, hf_name: str) -> _Tensor | None:
        name = self.gguf_name(hf_name)
        if name is None:
            return None
        shape = self.file.shape(name)
        if self._transposed(name):
            shape = tuple(reversed(shape))
        if hf_name.endswith("shared_expert_gate.weight") and len(shape) == 1:
            shape = (1, *shape)  # HF's [1, D]; llama.cpp may store it squeezed to [D]
        return _Tensor(shape, lambda rows: self._read_plain(name, shape, rows))

    def _read_plain(self, name: str, shape: tuple[int, ...], rows: slice | None) -> np.ndarray:
        permute = self._arch == "llama" and (".attn_q." in name or ".attn_k." in name)
        whole = permute or self._transposed(name) or len(shape) != len(self.file.shape(name))
        w = self.file.read(name, None if whole else rows)
        if permute:
            heads = self._heads if ".attn_q." in name else self._kv_heads
            if w.shape[0] % (2 * heads):
                raise JaxevalError(
                    f"tensor {name!r}: its {w.shape[0]} rows do not split into {heads} heads of "
                    "an even width",
                    file=self.path,
                    hint="the file's head counts do not match its tensors: download it again",
                )
            w = _unpermute(w, heads)
        if self._transposed(name):
            w = hf_weights.transpose(w)
        if self._arch in ("gemma2", "gemma3") and name.endswith("norm.weight"):
            w = w - np.float32(1.0)
        w = w.reshape(shape)
        return w[rows] if whole and rows is not None else w

    def _unsuffixed(self, hf_name: str) -> _Tensor | None:
        name = self._stacked(hf_name)  # gpt-oss `self_attn.sinks` -> `blk.N.attn_sinks.weight`
        if name is None:
            return None
        return _Tensor(self.file.shape(name), lambda rows: self.file.read(name, rows))

    def _expert(self, hf_name: str) -> _Tensor | None:
        """`...experts.{e}.{gate,up,down}_proj.weight`: expert e of a stacked GGUF tensor."""
        m = _EXPERT.fullmatch(hf_name)
        if m is None:
            return None
        pre, e, proj = m["pre"], int(m["e"]), m["proj"]
        name, half = self._stacked(f"{pre}.{proj}_proj"), None
        if name is None and proj != "down":
            name, half = self._fused_gate_up(pre), 0 if proj == "gate" else 1
        if name is None or e >= self.file.shape(name)[0]:
            return None
        shape = self.file.shape(name)[1:]
        if half is not None:
            shape = (shape[0] // 2, *shape[1:])

        def read(rows: slice | None) -> np.ndarray:
            w = self._expert_values(name, e)
            if half is not None:
                w = w[half * shape[0] : (half + 1) * shape[0]]
            return w if rows is None else w[rows]

        return _Tensor(shape, read)

    def _expert_values(self, name: str, e: int) -> np.ndarray:
        """Expert e of stacked `name` (read-only), from the kept run of experts or a new run from e."""
        run = self._run
        if run is None or run[0] != name or not run[1] <= e < run[1] + len(run[2]):
            count, *rest = self.file.shape(name)
            per_expert = 4 * int(np.prod(rest, dtype=np.int64))
            stop = min(count, e + max(1, self._cache_bytes // per_expert))
            self._run = None  # the old run is released before the new one is read
            values = self.file.read(name, slice(e, stop))
            values.flags.writeable = False
            self._run = run = (name, e, values)
        return run[2][e - run[1]]

    def _fused_experts(self, hf_name: str) -> _Tensor | None:
        """gpt-oss `experts.gate_up_proj[_bias]` / `experts.down_proj[_bias]`, fused over experts."""
        m = _FUSED_EXPERTS.fullmatch(hf_name)
        if m is None:
            return None
        pre, suffix = m["pre"], ".bias" if m["bias"] else ".weight"
        if m["proj"] == "down":
            name = self._stacked(f"{pre}.down_proj", suffix)
            if name is None:
                return None
            x, *rest = self.file.shape(name)  # weight [X, D, F] -> [X, F, D]
            if suffix == ".bias":
                return _Tensor((x, *rest), lambda rows: self.file.read(name, rows))
            return _Tensor(
                (x, *reversed(rest)), lambda rows: _swap_experts(self.file.read(name, rows))
            )
        gate, up = (
            self._stacked(f"{pre}.gate_proj", suffix),
            self._stacked(f"{pre}.up_proj", suffix),
        )
        fused = self._fused_gate_up(pre, suffix)
        if gate is None or up is None:
            if fused is None:
                return None
            x, f2, *rest = self.file.shape(fused)  # rows [gate | up]

            def parts(rows: slice | None) -> tuple[np.ndarray, np.ndarray]:
                w = self.file.read(fused, rows)
                return w[:, : f2 // 2], w[:, f2 // 2 :]

        else:
            x, f, *rest = self.file.shape(gate)
            f2 = 2 * f

            def parts(rows: slice | None) -> tuple[np.ndarray, np.ndarray]:
                return self.file.read(gate, rows), self.file.read(up, rows)

        if suffix == ".bias":  # [Nx, Fx] each -> [Nx, 2*Fx], interleaved
            return _Tensor((x, f2), lambda rows: np.stack(parts(rows), axis=-1).reshape(-1, f2))
        return _Tensor((x, *rest, f2), lambda rows: _interleave(*parts(rows)))
