"""How generation runs (`GenConfig`, frozen) and what the model's files say about it (EOS ids).

    GenConfig(batch_size=32, seed=1234)
    JaxLMConfig(pretrained=..., generation=GenConfig(...))  # nested in the model's arguments
    Generator(model=..., tokenizer=..., max_length=..., config=GenConfig(continuous=False))

None of these settings changes a generated token (settings and sampling keys are per row, per
request): they choose batch shapes and the order work is done in. `--model_args` reaches them as
`gen_batch_size`, `seed`, `max_gen_toks`, `gen_continuous`, `gen_min_prefix`, `gen_refill_rows`,
`gen_admission`, `gen_tail` and `gen_shrink_last_batch` (`JaxLMConfig.from_kwargs`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.lm.generate.kwargs import DEFAULT_MAX_GEN_TOKS

DEFAULT_SEED = 1234  # lm-eval's default torch seed
BARE_BATCH_SIZE = 16  # rows per batch of a Generator given no batch size
MIN_PREFIX = 32  # tokens: shorter common prefixes are recomputed (not worth a separate prefill)
ADMISSIONS = ("longest", "request")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GenConfig:
    """Generation settings of one model adapter (module docstring).

    batch_size          rows per batch (continuous batching: engine rows); None: the adapter's
                        choice (`JaxLMConfig.generation_batch_size`), 16 for a bare Generator
    seed                sampling keys derive from (seed, request index, repeat index)
    max_gen_toks        tokens generated when a request's gen_kwargs name no `max_gen_toks`
    continuous          continuous batching (`gen_engine`); None: whenever the model takes a
                        per-row cache index (our decoders do), else the static batches
    min_prefix          prompts sharing a prefix of at least this many tokens prefill it once
                        (0: never)
    refill_rows         free rows that end a decode chunk (None: a quarter of the engine rows)
    admission           "longest" (expected output, then prompt) or "request" order
    tail                the queue's tail decodes in smaller engines (`schedule.tail_rows`)
    shrink_last_batch   the static plan cuts each shape's last batch to the rows it has
    fit_rows            the continuous engine's rows halve until its cache fits the memory left
                        (`sizing.engine_rows`); False: `batch_size` was asked for explicitly
                        (`gen_batch_size`): checked against the memory, never cut
    """

    batch_size: int | None = None
    seed: int = DEFAULT_SEED
    max_gen_toks: int = DEFAULT_MAX_GEN_TOKS
    continuous: bool | None = None
    min_prefix: int = MIN_PREFIX
    refill_rows: int | None = None
    admission: str = "longest"
    tail: bool = True
    shrink_last_batch: bool = True
    fit_rows: bool = True

    def __post_init__(self) -> None:
        if self.batch_size is not None and int(self.batch_size) < 1:
            raise JaxevalError(
                f"batch_size must be >= 1, got {self.batch_size}", field="batch_size"
            )
        if int(self.max_gen_toks) < 1:
            raise JaxevalError(
                f"max_gen_toks must be >= 1, got {self.max_gen_toks}", field="max_gen_toks"
            )
        if int(self.min_prefix) < 0:
            raise JaxevalError(
                f"min_prefix must be >= 0, got {self.min_prefix}", field="min_prefix"
            )
        if self.refill_rows is not None and int(self.refill_rows) < 1:
            raise JaxevalError(
                f"refill_rows must be >= 1, got {self.refill_rows}", field="refill_rows"
            )
        if self.admission not in ADMISSIONS:
            raise JaxevalError(
                f"admission={self.admission!r} is not one of {', '.join(ADMISSIONS)}",
                field="admission",
            )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


def load_generation_config(path: str | None, hf_config: Any) -> Any:
    """The model's `GenerationConfig` as transformers builds it (file, else from the model config)."""
    from transformers import GenerationConfig

    if path and os.path.isfile(os.path.join(path, "generation_config.json")):
        return GenerationConfig.from_pretrained(path)
    return GenerationConfig.from_model_config(hf_config)


def eos_ids_of(gen_config: Any, hf_config: Any) -> tuple[int, ...]:
    """The EOS id(s) HF `generate` stops on: generation_config's, else the model config's."""
    eos = getattr(gen_config, "eos_token_id", None)
    if eos is None:
        eos = getattr(hf_config, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
