"""`Family`: one row of the families table (`table.py`), the type every row is.

Family(model_type="qwen3", checkpoints="Qwen3 dense", differs="per-head q/k RMSNorm",
       options=Decoder(sliding="after_max_window_layers", qk_norm="head"))
row.build(hf_config, "float32") -> ModelSpec;  row.weights(spec) -> tree of hf_weights.Source
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jaxeval.models.families.config import text_config
from jaxeval.models.families.dense import Decoder, build_decoder
from jaxeval.models.spec import ModelSpec
from jaxeval.models.weights import bounds
from jaxeval.models.weights import hf as hf_weights


@dataclasses.dataclass(frozen=True, kw_only=True)
class Family:
    """How to read one `model_type`: config -> spec, spec -> HF tensor sources, key aliases, and
    its row of the README's table.

    checkpoints  the README's "checkpoints" column
    differs      the README's "what differs from Llama" column
    builder      (cfg, compute_dtype, options) -> ModelSpec; Llama-style by default
    options      the builder's values: a `dense.Decoder` (None for Falcon's and GPT-2's builders)
    weights      spec -> tree of HF tensor sources (`weights/hf.py`); Llama's names by default
    aliases      (prefix, replacement) pairs tried where a checkpoint names a tensor otherwise
    text_config  an image-text config: build the decoder of its `text_config`
    """

    model_type: str
    checkpoints: str
    differs: str
    builder: Callable[[Any, str, Any], ModelSpec] = build_decoder
    options: Decoder | None = Decoder()
    weights: Callable[[ModelSpec], dict[str, Any]] = hf_weights.llama_like
    aliases: tuple[tuple[str, str], ...] = hf_weights.KEY_ALIASES["llama_like"]
    text_config: bool = False

    def build(self, cfg: Any, compute_dtype: str) -> ModelSpec:
        """The `ModelSpec` of this family's config `cfg`, its sizes first held to `bounds.CAPS`
        (per-layer tables are built from them)."""
        bounds.check_config(cfg)
        if self.text_config:
            cfg = text_config(cfg)
        return self.builder(cfg, compute_dtype, self.options)
