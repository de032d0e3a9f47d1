"""Evaluate a JAX model that lives in this process: no checkpoint, compiled once, during training.

Public surface:
    InMemoryLM(model, params, *, tokenizer, max_length=None, mesh=None, name=None, step=None, ...)
    InMemoryLM.from_nnx(module, *, tokenizer, max_length, hidden=, head_weight= | head= | logits=)
    InMemoryLM.from_linen(module, variables, *, tokenizer, max_length, ...)
    lm.update_params(params, step=None)
    FunctionModel(vocab_size=, hidden=, head_weight= | head=, | logits=, mask=, init_cache=,
                  forward_cached=)      the model contract for any function
    attention_mask(segment_ids, parent_ids) -> bool[B, T, T]   jaxeval's packing rule as a mask
    TokenCache                          the recomputation fallback's generation state

See docs/in_memory.md.
"""

from jaxeval.inmemory.function_model import FunctionModel, TokenCache, attention_mask
from jaxeval.inmemory.lm import InMemoryLM

__all__ = ["FunctionModel", "InMemoryLM", "TokenCache", "attention_mask"]
