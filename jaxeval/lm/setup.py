"""What a run decides before its first request, in one pure function: `JaxLM`, the in-memory LM
and `jaxeval plan` all call `run_setup`, so the plan describes the very run it plans.

    tokenizer = run_tokenizer(config, path=loaded.path, gguf_file=loaded.gguf_file)
    setup = run_setup(config, spec=loaded.spec, hf_config=loaded.hf_config, path=loaded.path,
                      tokenizer=tokenizer, mesh=mesh, free_bytes=device_free_bytes(mesh))
    setup.max_length, setup.token_budget, setup.buckets     # 2048, 8192, BucketSet(...)

From the model's arguments (`JaxLMConfig`), the model (`spec`, its HF config, where it lives),
the tokenizer and the mesh:

    max_length     `max_length=`, else the model's context (`encoding.resolve_max_length`)
    token_budget   `token_budget=`, else `budget.token_budget_for` on what a device has free after
                   the parameters (`free_bytes`; None: the CPU's rule), the smallest over processes
    buckets        the (T, K) grid of that budget (`buckets.parse_buckets`), rows a multiple of the
                   batch shards
    point_cost     a score point's cost in row tokens (`shaping.point_cost_of`)
    prompt rules   what generation's prompts read (`generate.prompts.PromptRules`): the encoder,
                   EOS ids and string, sampling defaults, special tokens

The generation engine's rows come later, from the work (`generate.shape.engine_shape`) and the
memory rule (`generate.sizing.engine_rows`) on `engine_free_bytes` (None: measured when the engine
is built, as a run does).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.lm.encoding import Encoder, resolve_max_length
from jaxeval.lm.generate.config import load_generation_config
from jaxeval.lm.generate.prompts import PromptRules, prompt_rules
from jaxeval.lm.model_config import JaxLMConfig
from jaxeval.lm.score.buckets import BucketSet, parse_buckets
from jaxeval.lm.score.budget import run_token_budget
from jaxeval.lm.score.shaping import POINT_COST, point_cost_of
from jaxeval.models.contract import capabilities_of
from jaxeval.platform.mesh import batch_shards

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class RunSetup:
    """What a run decides before any request (module docstring)."""

    config: JaxLMConfig
    spec: Any
    tokenizer: Any
    max_length: int
    token_budget: int
    buckets: BucketSet
    point_cost: float
    shards: int  # the mesh's batch shards
    rules: PromptRules  # generation's prompt rules (the encoder among them)
    engine_free_bytes: int | None  # per device for the generation engine; None: measured then

    @property
    def encoder(self) -> Encoder:
        return self.rules.encoder


def check_tokenizer_files(where: Any) -> None:
    """A local checkpoint directory must hold a tokenizer; transformers would otherwise try to
    convert a slow tokenizer and ask for sentencepiece, which misleads."""
    if not isinstance(where, str) or not os.path.isdir(where):
        return
    names = os.listdir(where)
    if not any(n in _TOKENIZER_FILES or n.endswith(".tiktoken") for n in names):
        raise JaxevalError(
            f"no tokenizer files in the directory (looked for {', '.join(_TOKENIZER_FILES)})",
            file=where,
            field="tokenizer",
            hint="copy the model's tokenizer files beside its weights, or pass tokenizer=DIR in "
            "--model_args",
        )


def run_tokenizer(config: JaxLMConfig, *, path: str, gguf_file: str | None = None) -> Any:
    """The run's tokenizer: a tokenizer object given as `tokenizer=`, else the one of a GGUF file,
    else transformers' from `tokenizer=DIR` or the checkpoint's directory `path` (a directory
    without tokenizer files is a clear error)."""
    tokenizer, revision, add_bos_token = config.tokenizer, config.revision, config.add_bos_token
    if tokenizer is not None and not isinstance(tokenizer, str):
        return tokenizer
    if tokenizer is None and gguf_file:
        # start-up: the gguf package and transformers' GGUF tables load only for a .gguf file
        from jaxeval.models.weights.gguf import load_tokenizer as gguf_tokenizer
        from jaxeval.models.weights.gguf_file import GGUFFile

        overrides = {} if add_bos_token is None else {"add_bos_token": add_bos_token}
        return gguf_tokenizer(GGUFFile(gguf_file), **overrides)
    from transformers import AutoTokenizer

    kwargs: dict[str, Any] = {
        "trust_remote_code": config.trust_remote_code,
        "use_fast": config.use_fast_tokenizer,
    }
    if revision and not os.path.isdir(tokenizer or path):
        kwargs["revision"] = revision
    if add_bos_token is not None:
        kwargs["add_bos_token"] = add_bos_token
    where = tokenizer or path
    check_tokenizer_files(where)
    try:
        return AutoTokenizer.from_pretrained(where, **kwargs)
    except (OSError, ValueError) as e:
        raise JaxevalError(
            f"the tokenizer could not be loaded: {str(e).strip().splitlines()[0]}",
            file=str(where),
            field="tokenizer",
            hint="give a directory holding the model's tokenizer files (tokenizer=DIR)",
        ) from None


def point_cost(spec: Any, params: Any = None) -> float:
    """A score point's cost in row tokens for this model (`shaping.point_cost_of`), which the
    scoring planner weighs padding points by; the default for a model that does not count its
    parameters (`contract.Capabilities.layout`)."""
    if not capabilities_of(spec).layout:
        return POINT_COST
    return point_cost_of(spec.hidden_size, spec.vocab_size, spec.body_param_count(params))


def run_setup(
    config: JaxLMConfig,
    *,
    spec: Any,
    hf_config: Any,
    path: str | None,
    tokenizer: Any,
    mesh: Any,
    free_bytes: int | None,
    engine_free_bytes: int | None = None,
    params: Any = None,
) -> RunSetup:
    """The run's decisions (module docstring) for `spec` on `mesh`, whose devices have
    `free_bytes` free after the parameters (None: the CPU's rule). `params`, when given, are
    counted for the point cost instead of the spec's layout."""
    max_length = int(config.max_length or resolve_max_length(hf_config, tokenizer))
    shards = batch_shards(mesh)
    budget = config.token_budget
    if budget is None:  # the same for N, auto and auto:N (`JaxLM`'s docstring)
        budget = run_token_budget(spec, free_bytes, shards, max_length, int(config.max_batch_size))
    buckets = parse_buckets(
        config.buckets, max_length=max_length, token_budget=int(budget), row_multiple=shards
    )
    rules = prompt_rules(
        Encoder(
            tokenizer, add_bos_token=config.add_bos_token, prefix_token_id=config.prefix_token_id
        ),
        config=config.gen_config,
        tokenizer=tokenizer,
        generation_config=load_generation_config(path, hf_config),
        hf_config=hf_config,
        max_length=max_length,
    )
    return RunSetup(
        config=config,
        spec=spec,
        tokenizer=tokenizer,
        max_length=max_length,
        token_budget=int(budget),
        buckets=buckets,
        point_cost=point_cost(spec, params),
        shards=shards,
        rules=rules,
        engine_free_bytes=engine_free_bytes,
    )
