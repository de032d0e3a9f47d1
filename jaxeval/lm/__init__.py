"""Models as the evaluator sees them: the `LM` interface, the model registry and `--model_args`."""

from jaxeval.lm.args import parse_model_args
from jaxeval.lm.base import LM, MODELS

__all__ = ["LM", "MODELS", "parse_model_args"]
