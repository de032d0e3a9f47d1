"""Greedy generation against transformers `generate` (tokens) and lm-eval's HFLM (strings), per family.

Each family's tiny checkpoint gets a second EOS id in its generation_config (a token its own greedy
output contains), so some rows end on EOS mid-batch; stop strings are 2-character pieces of the
model's own greedy text that straddle a token boundary, so they fire on text split across tokens.
Prompts have mixed lengths in one batch, and the longest is left-truncated to max_length - max_gen_toks.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.generation.conftest import (
    MAX_GEN,
    MAX_LENGTH,
    PROMPTS,
    hf_greedy,
    lm_eval_generate,
    set_generation_eos,
    spanning_stop,
)

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

# One family per tokenizer style and generation path: llama (BOS-adding tokenizer), gpt2 (GPT-2
# style, learned positions), gemma2 (sliding window and soft-capping while decoding), deepseek_v3
# (experts, MLA's latent KV cache). Every family's greedy tokens equal transformers' `generate`
# in tests/models/test_generation.py; what this file adds (EOS ids, stop strings across tokens,
# truncation, lm-eval's string handling) does not depend on the family.
FAMILIES = ("llama", "gpt2", "gemma2", "deepseek_v3")


@dataclasses.dataclass
class Case:
    family: str
    path: str
    tokenizer: object
    generator: object
    reference: list[list[int]]  # transformers' greedy tokens per prompt (EOS included)


@pytest.fixture(scope="module", params=FAMILIES)
def case(request, tmp_path_factory) -> Case:
    from transformers import AutoTokenizer

    from jaxeval.lm.encoding import Encoder
    from jaxeval.lm.generate.generator import Generator
    from jaxeval.models import load_model
    from tests.helpers.tiny_models import make_tiny_checkpoint

    family = request.param
    path = make_tiny_checkpoint(family, str(tmp_path_factory.mktemp(family)))
    tok = AutoTokenizer.from_pretrained(path)
    encoder = Encoder(tok)
    prompt_ids = [encoder.tok_encode(p)[-(MAX_LENGTH - MAX_GEN) :] for p in PROMPTS]
    assert len(encoder.tok_encode(PROMPTS[0])) > MAX_LENGTH - MAX_GEN  # truncation is exercised
    free = hf_greedy(path, prompt_ids, MAX_GEN, tok.eos_token_id)
    # an extra EOS id: a token first generated mid-row (tiny random models repeat themselves a lot)
    row, k = next(
        ((r, k) for r in (1, 2, 3, 0) for k in range(3, MAX_GEN) if free[r][k] not in free[r][:k]),
        (1, 0),
    )
    extra_eos = free[row][k]
    assert extra_eos not in tok.all_special_ids
    set_generation_eos(path, [tok.eos_token_id, extra_eos])
    reference = hf_greedy(path, prompt_ids, MAX_GEN, tok.eos_token_id)
    assert reference[row] == free[row][: k + 1]
    generator = Generator(
        model=load_model(path),
        tokenizer=tok,
        max_length=MAX_LENGTH,
        batch_size=16,
        encoder=encoder,
        shrink_last_batch=False,
    )
    return Case(family, path, tok, generator, reference)


def test_greedy_tokens_match_transformers(case):
    requests = [(p, {"max_gen_toks": MAX_GEN, "until": []}) for p in PROMPTS]
    ours = case.generator.generate_tokens(requests)
    assert ours == case.reference
    assert case.generator.stats["ended_stop_token"] >= 1


def test_strings_match_lm_eval(case):
    requests = []
    for i, prompt in enumerate(PROMPTS):
        requests.append((prompt, {"max_gen_toks": MAX_GEN}))  # until: only the EOS string
        stop = spanning_stop(case.tokenizer, case.reference[i])
        if stop is not None:
            requests.append((prompt, {"until": [stop], "max_gen_toks": MAX_GEN}))
            requests.append(
                (
                    prompt,
                    {"until": ["\n\n", "zz", stop], "max_new_tokens": MAX_GEN, "do_sample": False},
                )
            )
    assert len(requests) >= len(PROMPTS) + 4  # stop strings for at least two prompts
    ours = case.generator.generate_until(requests, disable_tqdm=True)
    stats = dict(case.generator.stats)
    theirs = lm_eval_generate(case.path, requests)
    assert ours == theirs
    assert stats["ended_stop_string"] >= 1  # the device stopped rows on stop strings
    assert stats["retried_prompts"] == 0
    compiled = case.generator.compile_count
    assert case.generator.generate_until(requests, disable_tqdm=True) == ours
    assert case.generator.compile_count == compiled  # every shape compiled once
