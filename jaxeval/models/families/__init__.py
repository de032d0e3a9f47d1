"""From a Hugging Face config to a `ModelSpec`: the supported families as rows of data over a few
shared builders, chosen by `model_type`.

    spec_from_config(hf_config, compute_dtype="bfloat16") -> ModelSpec(...)
    FAMILIES["gemma2"].build(hf_config, compute_dtype="bfloat16") -> ModelSpec(...)
    FAMILIES["gemma2"].weights(spec) -> tree of hf_weights.Source, same structure as the params
    families_markdown(gguf) -> the README's table of supported families

Modules:
    table.py    one `Family` row per model_type: README text, builder, options, weight map
    family.py   `Family`, the row type
    config.py   reading a config: `Field` / `When`, rope parameters, sliding layers, shared fields
    dense.py    the Llama-style builder and `Decoder`, a family's differences from Llama as values
    routing.py  `Experts`, an MoE family's routing as values, and the `MoESpec` it reads
    moe.py      the MoE builders: Llama-style attention or DeepSeek's latent attention (MLA)
    bespoke.py  Falcon and GPT-2, whose configs name their fields their own way
"""

from jaxeval.models.families.config import rope_parameters
from jaxeval.models.families.family import Family
from jaxeval.models.families.table import (
    FAMILIES,
    SUPPORTED_MODEL_TYPES,
    families_markdown,
    spec_from_config,
)

__all__ = [
    "FAMILIES",
    "SUPPORTED_MODEL_TYPES",
    "Family",
    "families_markdown",
    "rope_parameters",
    "spec_from_config",
]
