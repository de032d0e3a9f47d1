"""Generation requests -> distinct `Prompt`s with their copies, by lm-eval's rules; a pure function
of the run's `PromptRules` (no model, no device), shared by the `Generator` and `jaxeval plan`.

    rules = prompt_rules(encoder, config=gen_config, tokenizer=tok, generation_config=gc,
                         hf_config=hf, max_length=2048)
    build_prompts(rules, [("Q: 2+2?\\nA:", {"until": ["\\n"]}), ("Q: 2+2?\\nA:", {...})],
                  same=[0, 0])
    -> [Prompt(tokens=(1, 48, 17, ...), request_index=0, outputs=(0, 1), ...)]

Per distinct request, exactly as `HFLM.generate_until`: `gen_kwargs` normalized (stop strings with
the EOS string appended, `max_gen_toks`, greedy or sampling settings), the context encoded with
lm-eval's BOS rules and left-truncated to `max_length - max_gen_toks` tokens, and the stop rows
(EOS ids, stop strings) the device matches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.lm.encoding import Encoder
from jaxeval.lm.generate.config import GenConfig, eos_ids_of
from jaxeval.lm.generate.kwargs import SamplingDefaults, normalize
from jaxeval.lm.generate.plan import Prompt
from jaxeval.lm.generate.stops import special_token_ids, stop_rows


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class PromptRules:
    """What turns a request into a prompt: the encoder (lm-eval's BOS rules), the generation
    settings (`GenConfig`: `max_gen_toks`' default), the EOS string appended to the stop strings,
    the checkpoint's sampling defaults, the context length, the EOS ids and special tokens."""

    encoder: Encoder
    config: GenConfig
    eos_string: str | None
    sampling_defaults: SamplingDefaults
    max_length: int
    eos_ids: tuple[int, ...]
    specials: Any


def prompt_rules(
    encoder: Encoder,
    *,
    config: GenConfig,
    tokenizer: Any,
    generation_config: Any,
    hf_config: Any,
    max_length: int,
    eot_token_id: int | None = None,
) -> PromptRules:
    """The rules of a model: its tokenizer's EOS (or `eot_token_id`) decoded as the stop string,
    its `generation_config`'s EOS ids and sampling defaults."""
    eot = tokenizer.eos_token_id if eot_token_id is None else eot_token_id
    return PromptRules(
        encoder=encoder,
        config=config,
        eos_string=tokenizer.decode(eot, skip_special_tokens=False) if eot is not None else None,
        sampling_defaults=SamplingDefaults.from_generation_config(generation_config),
        max_length=int(max_length),
        eos_ids=eos_ids_of(generation_config, hf_config),
        specials=special_token_ids(tokenizer),
    )


def build_prompts(
    rules: PromptRules,
    requests: Sequence[tuple[str, dict]],
    *,
    same: Sequence[int] | None = None,
) -> list[Prompt]:
    """Distinct prompts with their copies. `same[i]` = position of request i's first copy."""
    same = list(range(len(requests))) if same is None else list(same)
    firsts = sorted(set(same))
    copies: dict[int, list[int]] = {f: [] for f in firsts}
    for i, f in enumerate(same):
        copies[f].append(i)
    contexts = [requests[f][0] for f in firsts]
    encoded = rules.encoder.tok_encode_many(contexts)
    out = []
    for k, (f, ids) in enumerate(zip(firsts, encoded)):
        context, gen_kwargs = requests[f]
        if not isinstance(context, str):
            raise JaxevalError(f"request {f}: the context must be a string, got {context!r}")
        try:
            settings = normalize(
                gen_kwargs,
                eos=rules.eos_string,
                default_max_gen_toks=rules.config.max_gen_toks,
                sampling_defaults=rules.sampling_defaults,
            )
        except JaxevalError as err:
            raise err.located(doc=f) from None
        max_ctx = rules.max_length - settings.max_gen_toks
        if max_ctx <= 0:
            raise JaxevalError(
                f"max_gen_toks ({settings.max_gen_toks}) must be less than the model's "
                f"max_length ({rules.max_length})",
                field="max_gen_toks",
            )
        ids = list(ids)[-max_ctx:]
        if not ids:
            raise JaxevalError(
                f"request {f}: the context encodes to no tokens (empty prompt)",
                hint="give a non-empty context or a tokenizer that adds BOS",
            )
        stops = stop_rows(settings.until, eos_ids=rules.eos_ids, specials=rules.specials)
        out.append(
            Prompt(
                tokens=tuple(int(t) for t in ids),
                settings=settings,
                stops=stops,
                request_index=k,
                outputs=tuple(copies[f]),
            )
        )
    return out
