"""jaxeval: lm-evaluation-harness scores, request for request, from a sharded JAX forward pass.

Public API (lm-eval's signatures):

    import jaxeval
    results = jaxeval.simple_evaluate(model="jax", model_args="pretrained=DIR", tasks=["arc_easy"])
    lm = jaxeval.InMemoryLM(spec, params, tokenizer=tok)   # a model in memory (docs/in_memory.md)
    results = jaxeval.simple_evaluate(model=lm, tasks=["arc_easy"])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "simple_evaluate",
    "evaluate",
    "TaskManager",
    "JaxevalError",
    "Instance",
    "LM",
    "InMemoryLM",
    "FunctionModel",
    "__version__",
]

if TYPE_CHECKING:  # pragma: no cover
    from jaxeval.api.instance import Instance
    from jaxeval.api.task_manager import TaskManager
    from jaxeval.errors import JaxevalError
    from jaxeval.evaluator import evaluate, simple_evaluate
    from jaxeval.inmemory import FunctionModel, InMemoryLM
    from jaxeval.lm.base import LM

_LAZY = {
    "simple_evaluate": "jaxeval.evaluator",
    "evaluate": "jaxeval.evaluator",
    "TaskManager": "jaxeval.api.task_manager",
    "JaxevalError": "jaxeval.errors",
    "Instance": "jaxeval.api.instance",
    "LM": "jaxeval.lm.base",
    "InMemoryLM": "jaxeval.inmemory",
    "FunctionModel": "jaxeval.inmemory",
}


def __getattr__(name: str) -> Any:
    """Lazy imports keep `import jaxeval` cheap (no JAX or datasets import until needed)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jaxeval' has no attribute {name!r}")
