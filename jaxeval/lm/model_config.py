"""`JaxLMConfig`: the jax model's arguments (`--model_args` and `JaxLM(...)` keywords) in one place.

    JaxLMConfig.from_kwargs(parse_model_args("pretrained=/m,dtype=bfloat16,batch_size=auto:4"))
    -> JaxLMConfig(pretrained="/m", dtype="bfloat16", batch_size="auto", ...)

The fields are the arguments: the "unknown model argument" message lists them from the dataclass
itself, so it can never fall behind. HF-backend arguments that mean nothing here (`device`,
`parallelize`, ...) are accepted and dropped, so an lm_eval command line works unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from jaxeval.errors import JaxevalError

# HFLM arguments accepted for command-line compatibility that change nothing here.
IGNORED_HF_ARGS = (
    "device",
    "parallelize",
    "logits_cache",
    "device_map",
    "max_memory_per_gpu",
    "offload_folder",
)
GEN_MIN_BATCH = 16  # generation rows per batch when lm-eval's batch_size N is smaller


def parse_batch_size(batch_size: int | str) -> int | str:
    """lm-eval's `N`, `auto` or `auto:N` -> an int or "auto" (scoring batches ignore it: packed)."""
    if isinstance(batch_size, str):
        text = batch_size.strip().lower()
        if text.startswith("auto"):
            return "auto"
        try:
            return int(text)
        except ValueError:
            raise JaxevalError(
                f"batch_size={batch_size!r} is neither an integer nor 'auto'/'auto:N'",
                field="batch_size",
            ) from None
    if int(batch_size) < 1:
        raise JaxevalError(f"batch_size must be >= 1, got {batch_size}", field="batch_size")
    return int(batch_size)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JaxLMConfig:
    """Everything `JaxLM` takes. `pretrained` is a checkpoint directory, hub id, `.gguf` path or an
    already loaded `jaxeval.models.LoadedModel`; `mesh` a preset name or a `jax.sharding.Mesh`;
    `tokenizer` a directory or a tokenizer object."""

    pretrained: Any
    dtype: str = "auto"
    batch_size: int | str = 1
    max_batch_size: int = 64
    max_length: int | None = None
    add_bos_token: bool | None = None
    prefix_token_id: int | None = None
    trust_remote_code: bool = False
    revision: str | None = "main"
    tokenizer: Any = None
    use_fast_tokenizer: bool = True
    backend: str = "default"
    softmax_dtype: str | None = None
    mesh: Any = None
    token_budget: int | None = None
    buckets: Any = None
    packing: bool = True
    shared_context: bool = True
    vocab_chunk: int | None = None
    gen_batch_size: int | None = None
    seed: int = 1234
    gguf_file: str | None = None
    compilation_cache: str | None = None

    def __post_init__(self) -> None:
        if self.pretrained is None:
            raise JaxevalError(
                "the jax model needs pretrained=<checkpoint dir or hub id>", field="model_args"
            )
        if self.backend not in ("default", "causal"):
            raise JaxevalError(
                f"backend={self.backend!r} is not supported; jaxeval scores causal LMs",
                field="backend",
            )
        if self.softmax_dtype not in (None, "float32", "fp32"):
            raise JaxevalError(
                "softmax_dtype: log-softmax always runs in float32 here", field="softmax_dtype"
            )
        object.__setattr__(self, "batch_size", parse_batch_size(self.batch_size))
        if int(self.max_batch_size) < 1:
            raise JaxevalError(
                f"max_batch_size must be >= 1, got {self.max_batch_size}", field="max_batch_size"
            )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> JaxLMConfig:
        """Keyword arguments (typed `--model_args` plus lm-eval's batch settings) -> a config;
        an unknown name is an error listing the known ones."""
        unknown = sorted(set(kwargs) - set(cls.names()) - set(IGNORED_HF_ARGS))
        if unknown:
            raise JaxevalError(
                f"unknown model argument(s) {', '.join(unknown)} for the jax model",
                field="model_args",
                hint="known: " + ", ".join(cls.names()),
            )
        return cls(**{k: v for k, v in kwargs.items() if k in cls.names()})

    @property
    def generation_batch_size(self) -> int:
        """Generation rows per batch. Outputs never depend on it (per-row settings and PRNG keys),
        so lm-eval's default batch_size=1 does not force one prompt at a time here."""
        if self.gen_batch_size:
            return int(self.gen_batch_size)
        if isinstance(self.batch_size, int):
            return max(self.batch_size, GEN_MIN_BATCH)
        return int(self.max_batch_size)
