"""JAX model zoo: our own decoders for HF checkpoints, logits equal to transformers' PyTorch forward.

Public surface:
    load_model(pretrained, *, mesh=None, dtype="float32", compute_dtype=None, revision=None,
               trust_remote_code=False) -> LoadedModel
    LoadedModel(spec, params, hf_config, path, mesh, runtime)
    ModelSpec  (what the model is, hashable; .hidden, .head_weight, .finalize_logits, .head,
                .init_cache, .forward_cached, .param_count, .abstract_params, .init_params)
    Runtime, make_runtime, REFERENCE  (how it runs: mesh, attention and expert backends)
    KVCache, SUPPORTED_MODEL_TYPES, spec_from_config, param_count,
    LOGICAL_AXIS_RULES, param_shardings, cache_shardings
"""

from jaxeval.models.contract import KVCache
from jaxeval.models.families import SUPPORTED_MODEL_TYPES, spec_from_config
from jaxeval.models.loader import LoadedModel, load_model
from jaxeval.models.params import param_count
from jaxeval.models.runtime import REFERENCE, Runtime, make_runtime
from jaxeval.models.sharding import LOGICAL_AXIS_RULES, cache_shardings, param_shardings
from jaxeval.models.spec import ModelSpec

__all__ = [
    "KVCache",
    "LOGICAL_AXIS_RULES",
    "LoadedModel",
    "ModelSpec",
    "REFERENCE",
    "Runtime",
    "SUPPORTED_MODEL_TYPES",
    "cache_shardings",
    "load_model",
    "make_runtime",
    "param_count",
    "param_shardings",
    "spec_from_config",
]
