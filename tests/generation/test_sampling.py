"""Sampling: seeded and reproducible, independent of batch size and device count; top-k=1 is greedy;
repeats share one prefill; compilations stay within the bucket shapes."""

from __future__ import annotations

import functools

import pytest

pytestmark = pytest.mark.slow

PROMPTS = (
    "The quick brown fox",
    "Question: What is the capital of France?\nAnswer:",
    "In 1969, Neil Armstrong became",
    "A",
    "def add(a, b):",
)
SAMPLED = {"do_sample": True, "temperature": 1.3, "top_k": 40, "top_p": 0.95, "max_gen_toks": 12}
GREEDY = {"max_gen_toks": 12, "until": ["zzz"]}


@functools.cache
def llama_path() -> str:
    from tests.helpers.tiny_models import tiny_checkpoint

    return tiny_checkpoint("llama")


@functools.cache
def generator(batch_size: int = 8, seed: int = 1234, mesh: str = "single"):
    from transformers import AutoTokenizer

    from jaxeval.lm.generate.generator import Generator
    from jaxeval.models import load_model
    from jaxeval.platform.mesh import make_mesh

    path = llama_path()
    return Generator(
        model=load_model(path, mesh=make_mesh(mesh)),
        tokenizer=AutoTokenizer.from_pretrained(path),
        max_length=128,
        batch_size=batch_size,
        seed=seed,
        shrink_last_batch=False,
    )


def sampled_requests():
    return [(p, dict(SAMPLED)) for p in PROMPTS]


def test_fixed_seed_reproduces_and_seeds_differ():
    gen = generator()
    first = gen.generate_tokens(sampled_requests())
    again = gen.generate_tokens(sampled_requests())
    assert first == again
    other = generator(seed=7).generate_tokens(sampled_requests())
    assert other != first


def test_samples_do_not_depend_on_batch_size():
    eight = generator(batch_size=8).generate_tokens(sampled_requests())
    one = generator(batch_size=1).generate_tokens(sampled_requests())
    assert one == eight
    # nor on the other requests sharing the batch (keys come from the request's index in the call)
    cooler = dict(SAMPLED, temperature=0.5, top_k=0)
    mixed = sampled_requests() + [(p[::-1], dict(cooler)) for p in PROMPTS]
    assert generator(batch_size=8).generate_tokens(mixed)[: len(PROMPTS)] == eight


def test_top_k_1_is_greedy():
    gen = generator()
    greedy = gen.generate_tokens([(p, dict(GREEDY)) for p in PROMPTS])
    top1 = dict(GREEDY, do_sample=True, temperature=0.7, top_k=1)
    assert gen.generate_tokens([(p, dict(top1)) for p in PROMPTS]) == greedy


def test_sharded_equals_single_device():
    import jax

    if len(jax.devices()) < 8:
        pytest.skip("needs 8 (fake) devices")
    single = generator().generate_tokens(sampled_requests())
    sharded_gen = generator(mesh="data")
    assert sharded_gen.shards == 8
    assert sharded_gen.generate_tokens(sampled_requests()) == single


def test_repeats_share_one_prefill():
    from jaxeval.api.instance import Instance
    from jaxeval.lm.generate.generator import request_pairs

    gen = generator()
    a = Instance("generate_until", {}, (PROMPTS[1], dict(SAMPLED)), 0)
    b = Instance("generate_until", {}, (PROMPTS[2], dict(SAMPLED)), 1)
    listed = [a] * 4 + [b] * 4  # how the evaluator expands repeats=4
    pairs, same = request_pairs(listed)
    assert same == [0, 0, 0, 0, 4, 4, 4, 4]
    out = gen.generate_tokens(pairs, same=same)
    assert (
        gen.stats["batches"] == 1
    )  # 2 prompts x 4 copies: one admission, one prefill of 2 prompts
    assert gen.stats["prompt_tokens"] == sum(len(gen.encoder.tok_encode(p)) for p in PROMPTS[1:3])
    assert len({tuple(t) for t in out[:4]}) > 1  # the copies are different samples
    # each copy is the same sample whatever else is in the batch
    alone = gen.generate_tokens(pairs[:4], same=same[:4])
    assert alone == out[:4]


def test_compile_count_bounded_by_buckets():
    from transformers import AutoTokenizer

    from jaxeval.lm.generate.generator import Generator
    from jaxeval.lm.generate.plan import plan_gen_batches
    from jaxeval.lm.generate.prompts import build_prompts
    from jaxeval.models import load_model

    path = llama_path()
    gen = Generator(
        model=load_model(path),
        tokenizer=AutoTokenizer.from_pretrained(path),
        max_length=128,
        batch_size=4,
        continuous=False,  # the static plan's buckets (continuous: tests/generation/test_continuous.py)
    )
    long = "The quick brown fox jumps over the lazy dog. " * 3
    requests = [(p, {"max_gen_toks": 8}) for p in PROMPTS] + [
        (long, {"max_gen_toks": 8}),
        (long, {"max_gen_toks": 20, "until": ["\n"]}),
    ]
    plan = plan_gen_batches(build_prompts(gen.rules, requests), batch_size=4, shards=1)
    shapes = {pb.shape for pb in plan}
    # U in {1, 2, 4}, P in {16, 32}, N in {16, 32}: few shapes, each compiled once
    assert len(plan) == 3 and len(shapes) == 3
    gen.generate_until(requests, disable_tqdm=True)
    assert gen.compile_count == len(shapes)
    gen.generate_until(requests, disable_tqdm=True)
    gen.generate_until(list(reversed(requests)), disable_tqdm=True)
    assert gen.compile_count == len(shapes)


def test_adapter_entry_point_takes_instances():
    from transformers import AutoTokenizer

    from jaxeval.api.instance import Instance
    from jaxeval.lm.generate.generator import generate_until
    from jaxeval.models import load_model

    path = llama_path()
    model, tok = load_model(path), AutoTokenizer.from_pretrained(path)
    insts = [Instance("generate_until", {}, (p, dict(GREEDY)), i) for i, p in enumerate(PROMPTS)]
    kwargs = dict(model=model, tokenizer=tok, max_length=128, batch_size=8, disable_tqdm=True)
    texts = generate_until(insts, **kwargs)
    assert texts == generator().generate_until([i.args for i in insts], disable_tqdm=True)
    assert generate_until(insts[::-1], **kwargs) == texts[::-1]  # cached Generator, same answers
