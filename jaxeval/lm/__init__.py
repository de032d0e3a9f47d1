"""Models as the evaluator sees them: the `LM` interface, the model registry, `--model_args`, and the
JAX adapter (`JaxLM`, registered as "jax" and "hf") with its encoding, planning and bucketing.

The JAX-side names load lazily, so the task engine and CLI errors never pay for importing JAX.
"""

from __future__ import annotations

import importlib
from typing import Any

from jaxeval.lm.args import parse_model_args
from jaxeval.lm.base import LM, MODELS

_LAZY = {
    "Bucket": "jaxeval.lm.score.buckets",
    "BucketSet": "jaxeval.lm.score.buckets",
    "make_buckets": "jaxeval.lm.score.buckets",
    "Encoder": "jaxeval.lm.encoding",
    "resolve_max_length": "jaxeval.lm.encoding",
    "rolling_windows": "jaxeval.lm.encoding",
    "truncate_request": "jaxeval.lm.encoding",
    "JaxLM": "jaxeval.lm.jax_lm",
    "ScorePlan": "jaxeval.lm.score.planner",
    "plan_score_batches": "jaxeval.lm.score.planner",
    "Generator": "jaxeval.lm.generate.generator",
    "generate_until": "jaxeval.lm.generate.generator",
}

__all__ = ["LM", "MODELS", "parse_model_args", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jaxeval.lm' has no attribute {name!r}")
