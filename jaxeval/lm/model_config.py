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
from numbers import Integral
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.lm.generate.config import GenConfig

# HFLM arguments accepted for command-line compatibility that change nothing here.
IGNORED_HF_ARGS = (
    "device",
    "parallelize",
    "logits_cache",
    "device_map",
    "max_memory_per_gpu",
    "offload_folder",
)
GEN_MIN_BATCH = 64  # generation rows per batch when lm-eval's batch_size N is smaller
MAX_BATCH_SIZE = 64  # `max_batch_size`'s default (lm-eval's), which caps the token budget
# `--model_args` names of `GenConfig`'s fields (`generation`): name -> field
GEN_ARGS = {
    "gen_batch_size": "batch_size",
    "seed": "seed",
    "max_gen_toks": "max_gen_toks",
    "gen_continuous": "continuous",
    "gen_min_prefix": "min_prefix",
    "gen_refill_rows": "refill_rows",
    "gen_admission": "admission",
    "gen_tail": "tail",
    "gen_shrink_last_batch": "shrink_last_batch",
}
# `jaxeval.models.attention.SETTINGS`, named here without importing JAX
ATTENTION = ("auto", "xla", "cpu", "tpu", "gpu")
EXPERTS = ("auto", "ragged", "blocked")  # `experts.SETTINGS`


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
    `tokenizer` a directory or a tokenizer object; `attention` the attention backend (None: the
    `JAXEVAL_ATTENTION` variable, else `auto`: `jaxeval.models.attention`); `experts` the
    Mixture-of-Experts backend (None: `JAXEVAL_MOE`, else `auto`: `models.experts`); `generation`
    the generation settings (`GenConfig`; from `--model_args` through `GEN_ARGS`'s names);
    `cache_hash_weights` identifies the weights by a sha256 of their bytes in the response cache's
    fingerprint, instead of size and mtime (`jaxeval.lm.fingerprint`).

    `generation.batch_size` None (the default) takes the generation rows per batch from lm-eval's
    batch_size (`generation_batch_size`); `gen_config` is the resolved `GenConfig`."""

    pretrained: Any
    dtype: str = "auto"
    batch_size: int | str = 1
    max_batch_size: int = MAX_BATCH_SIZE
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
    gguf_file: str | None = None
    compilation_cache: str | None = None
    attention: str | None = None
    experts: str | None = None
    generation: GenConfig | None = None
    cache_hash_weights: bool = False

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
        budget = self.token_budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, Integral)):
            raise JaxevalError(
                f"token_budget={budget!r} is not an integer",
                field="token_budget",
                hint="give token_budget=N (tokens per scoring batch), or leave it out to fit the device",
            )
        if budget is not None and budget < 1:
            raise JaxevalError(
                f"token_budget={budget} must be at least 1",
                field="token_budget",
                hint="give token_budget=N (tokens per scoring batch), or leave it out to fit the device",
            )
        if int(self.max_batch_size) < 1:
            raise JaxevalError(
                f"max_batch_size must be >= 1, got {self.max_batch_size}", field="max_batch_size"
            )
        if self.attention is not None and str(self.attention).lower() not in ATTENTION:
            raise JaxevalError(
                f"attention={self.attention!r} is not one of {', '.join(ATTENTION)}",
                field="attention",
            )
        if self.experts is not None and str(self.experts).lower() not in EXPERTS:
            raise JaxevalError(
                f"experts={self.experts!r} is not one of {', '.join(EXPERTS)}", field="experts"
            )
        if self.generation is not None and not isinstance(self.generation, GenConfig):
            raise JaxevalError(
                f"generation must be a GenConfig, got {type(self.generation).__name__}",
                field="generation",
            )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every model argument: the fields, and `GenConfig`'s under their `GEN_ARGS` names."""
        return tuple(f.name for f in dataclasses.fields(cls)) + tuple(GEN_ARGS)

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
        gen = {GEN_ARGS[k]: v for k, v in kwargs.items() if k in GEN_ARGS and v is not None}
        fields = {f.name for f in dataclasses.fields(cls)}
        own = {k: v for k, v in kwargs.items() if k in fields}
        if gen:
            if own.get("generation") is not None:
                raise JaxevalError(
                    "give either generation=GenConfig(...) or its model arguments "
                    f"({', '.join(sorted(k for k in kwargs if k in GEN_ARGS))}), not both",
                    field="generation",
                )
            own["generation"] = _gen_config(gen)
        own.setdefault("pretrained", None)  # missing: `__post_init__` says what to pass
        return cls(**own)

    @property
    def gen_config(self) -> GenConfig:
        """The generation settings in force: `generation` with its batch size resolved
        (`generation_batch_size`)."""
        base = self.generation or GenConfig()
        given = base.batch_size is not None
        return dataclasses.replace(
            base, batch_size=self.generation_batch_size, fit_rows=base.fit_rows and not given
        )

    @property
    def generation_batch_size(self) -> int:
        """Generation rows per batch: `gen_batch_size` when given, else from lm-eval's batch_size
        (at least 64; `auto`: max_batch_size). Outputs never depend on it (per-row settings and
        PRNG keys), so lm-eval's default batch_size=1 does not force one prompt at a time here."""
        given = self.generation.batch_size if self.generation is not None else None
        if given is not None:
            return int(given)
        if isinstance(self.batch_size, int):
            return max(self.batch_size, GEN_MIN_BATCH)
        return int(self.max_batch_size)


def _gen_config(fields: dict[str, Any]) -> GenConfig:
    """`GenConfig(**fields)`, its errors named by their `--model_args` spelling."""
    try:
        return GenConfig(**fields)
    except TypeError as err:
        raise JaxevalError(f"generation settings: {err}", field="model_args") from None
