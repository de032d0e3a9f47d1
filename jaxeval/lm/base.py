"""The model interface the evaluator calls: lm-eval's three request methods, same signatures.

    lm.loglikelihood([Instance(args=(ctx, cont)), ...])      -> [(logprob: float, is_greedy: bool), ...]
    lm.loglikelihood_rolling([Instance(args=(text,)), ...])  -> [logprob: float, ...]
    lm.generate_until([Instance(args=(ctx, gen_kwargs)), ...]) -> [text: str, ...]

Each method answers every request exactly once, in the order given.
"""

from __future__ import annotations

import abc
from typing import Any

from jaxeval.api.instance import Instance
from jaxeval.lm.args import parse_model_args
from jaxeval.registry import Registry


class LM(abc.ABC):
    """Base class for models. Subclasses implement the three request methods."""

    @abc.abstractmethod
    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]: ...

    @abc.abstractmethod
    def loglikelihood_rolling(self, requests: list[Instance]) -> list[float]: ...

    @abc.abstractmethod
    def generate_until(self, requests: list[Instance]) -> list[str]: ...

    # Multi-host: every process builds the same plan; only rank 0 writes files.
    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def is_main_process(self) -> bool:
        """Whether this process reports results and writes files (multi-host: process 0 only)."""
        return self.rank == 0

    @property
    def tokenizer_name(self) -> str:
        return ""

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no chat template support")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return None

    def model_info(self) -> dict[str, Any]:
        """Extra `config` entries for the results file (dtype, parameter count, ...)."""
        return {}

    @classmethod
    def create_from_arg_string(
        cls, arg_string: str, additional_config: dict[str, Any] | None = None
    ) -> LM:
        kwargs = parse_model_args(arg_string)
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        return cls(**kwargs, **extra)


MODELS: Registry[type[LM]] = Registry("model")
