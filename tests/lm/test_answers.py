"""Answers travel as keywords and values: `known` and `on_answers` on the request methods, and
`Scorer.run_plan` yielding one `BatchAnswers` per batch.

* The response cache passes the keywords to a model whose methods take them (read from the
  signature), and keeps working for one that does not.
* A resumed call (one process) sends every request with the stored ones as `known`; the answers
  computed come back through `on_answers`, one commit per call.
* On process 0 of several, the tap between the cache and the model shows the model's signature, so
  its answers are committed batch by batch there too.
* The per-batch adapters: arrays -> (logprob, is_greedy) pairs, windows -> document totals.
* `run_plan` on a toy model: one batch ahead on the device, skipped batches, exactly once.
"""

from __future__ import annotations

import numpy as np
import pytest
from jax.sharding import Mesh

from jaxeval import cache
from jaxeval.api.instance import Instance
from jaxeval.cache import CachingLM, ResponseStore, takes_answers
from jaxeval.lm.answers import on_scored_documents, on_scored_pairs
from jaxeval.lm.score.scorer import BatchAnswers, answer_arrays, not_run
from jaxeval.platform import distributed
from tests.lm.test_resume import CountingStore


def _ll(*conts: str) -> list[Instance]:
    return [Instance("loglikelihood", {}, ("ctx", c), i) for i, c in enumerate(conts)]


def _value(req: Instance) -> tuple[float, bool]:
    return (-float(len(req.args[1])), True)


class KeywordLM:
    """Takes `known` and `on_answers`; answers in batches of two, calling `on_answers` per batch."""

    def __init__(self):
        self.calls: list[dict] = []

    def fingerprint(self):
        return "keyword-lm"

    def loglikelihood(self, requests, disable_tqdm=False, *, known=None, on_answers=None):
        known = known or {}
        self.calls.append({"n": len(requests), "known": dict(known)})
        out = [known.get(i) or _value(r) for i, r in enumerate(requests)]
        todo = [i for i in range(len(requests)) if i not in known]
        for start in range(0, len(todo), 2):
            batch = todo[start : start + 2]
            if on_answers is not None:
                on_answers(batch, [out[i] for i in batch])
        return out


class PlainLM:
    """lm-eval's plain signature: no keywords."""

    def __init__(self):
        self.sent: list[int] = []

    def fingerprint(self):
        return "keyword-lm"  # the same key space as KeywordLM: its answers are served here

    def loglikelihood(self, requests):
        self.sent.append(len(requests))
        return [_value(r) for r in requests]


def test_takes_answers_reads_the_signature():
    assert takes_answers(KeywordLM().loglikelihood)
    assert not takes_answers(PlainLM().loglikelihood)
    assert not takes_answers(lambda requests, **kwargs: None)  # could be anything
    assert not takes_answers(lambda requests, *, known=None: None)  # only one of the two
    assert not takes_answers(len)


@pytest.mark.parametrize("method", ["loglikelihood", "loglikelihood_rolling", "generate_until"])
def test_jax_and_in_memory_lms_take_the_answers_keywords(method):
    from jaxeval.inmemory.lm import InMemoryLM
    from jaxeval.lm.jax_lm import JaxLM

    assert takes_answers(getattr(JaxLM, method)) and takes_answers(getattr(InMemoryLM, method))


def test_cache_passes_on_answers_and_commits_per_call(tmp_path):
    store = CountingStore(str(tmp_path / "c.db"))
    model = KeywordLM()
    reqs = _ll("a", "bb", "ccc", "dddd", "eeeee")
    assert CachingLM(model, store).loglikelihood(reqs) == [_value(r) for r in reqs]
    assert store.commits == [2, 2, 1]  # one transaction per `on_answers` call
    assert model.calls == [{"n": 5, "known": {}}]


def test_resumed_call_sends_every_request_with_the_stored_ones_known(tmp_path):
    path = str(tmp_path / "c.db")
    reqs = _ll("a", "bb", "ccc", "dddd")
    CachingLM(KeywordLM(), path).loglikelihood([reqs[0], reqs[2]])
    model = KeywordLM()
    resumed = CachingLM(model, CountingStore(path), full_plan=True)
    assert resumed.loglikelihood(reqs) == [_value(r) for r in reqs]
    assert model.calls == [{"n": 4, "known": {0: _value(reqs[0]), 2: _value(reqs[2])}}]
    assert resumed.store.commits == [2]
    assert resumed.cache_stats() == {"served": 2, "computed": 2}
    assert not hasattr(model, "known_answers") and not hasattr(model, "answer_hook")


def test_model_without_the_keywords_gets_only_the_misses(tmp_path):
    path = str(tmp_path / "c.db")
    reqs = _ll("a", "bb", "ccc")
    CachingLM(KeywordLM(), path).loglikelihood(reqs[:1])
    model = PlainLM()
    cached = CachingLM(model, CountingStore(path), full_plan=True)
    assert cached.loglikelihood(reqs) == [_value(r) for r in reqs]
    assert model.sent == [2] and cached.store.commits == [2]  # stored when the call returned


def test_leader_of_several_processes_commits_batch_by_batch(tmp_path, monkeypatch):
    messages: list = []
    monkeypatch.setattr(distributed, "process_count", lambda: 2)
    monkeypatch.setattr(distributed, "is_main_process", lambda: True)
    monkeypatch.setattr(distributed, "broadcast_json", lambda obj=None: messages.append(obj))
    path = str(tmp_path / "c.db")
    CachingLM(KeywordLM(), path).loglikelihood(_ll("bb"))
    commits = []
    put = ResponseStore.put
    monkeypatch.setattr(
        ResponseStore, "put", lambda s, rows: (commits.append(len(rows)), put(s, rows))
    )
    model = KeywordLM()
    leader = cache.response_cache(model, path)
    reqs = _ll("a", "bb", "ccc", "dddd")
    assert leader.loglikelihood(reqs) == [_value(r) for r in reqs]
    assert messages == [[0, 2, 3]]  # only the misses run, on every process
    assert model.calls == [{"n": 3, "known": {}}]
    assert [c for c in commits if c] == [2, 1]  # batch by batch, through `on_answers`


def _answers(indices, loglik, greedy=None, ran=True):
    n = len(indices)
    return BatchAnswers(
        indices=np.asarray(indices),
        loglik=np.asarray(loglik, np.float32),
        greedy=np.asarray(greedy if greedy is not None else [False] * n),
        real_tokens=7 * n,
        dispatched_at=1.0 if ran else None,
    )


def test_answer_arrays_in_request_order():
    loglik, greedy = answer_arrays(
        [_answers([2, 0], [-1.5, -0.25], [True, False]), _answers([1], [-4.0], [True])], 3
    )
    np.testing.assert_array_equal(loglik, np.float32([-0.25, -4.0, -1.5]))
    np.testing.assert_array_equal(greedy, [False, True, True])
    skipped = not_run(np.asarray([4, 5]))
    assert not skipped.ran and skipped.real_tokens == 0 and np.isnan(skipped.loglik).all()


def test_on_scored_pairs_hands_on_python_values():
    got = []
    on_scored_pairs(lambda p, a: got.append((p, a)))(_answers([3, 1], [-2.5, -0.75], [False, True]))
    assert got == [([3, 1], [(-2.5, False), (-0.75, True)])]
    assert type(got[0][1][0][0]) is float and type(got[0][1][1][1]) is bool


def test_on_scored_documents_hands_on_each_finished_document():
    got = []
    on_scored = on_scored_documents(lambda d, t: got.append((d, t)), owner=[0, 0, 1, 2, 2])
    on_scored(_answers([2, 0], [-1.0, -0.5]))
    on_scored(_answers([3], [-8.0]))  # document 2 still waits for window 4
    on_scored(_answers([4, 1], [-0.25, -2.0]))
    assert got == [([1], [-1.0]), ([2, 0], [-8.25, -2.5])]


# ---- run_plan on a toy model -----------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_scorer():
    import jax

    from jaxeval.lm.score.buckets import make_buckets
    from jaxeval.lm.score.scorer import Scorer
    from tests.kernels.toy_model import ToyModel

    model = ToyModel()
    buckets = make_buckets(max_length=32, token_budget=64, lengths=[16, 32])
    scorer = Scorer(
        model=model,
        params=model.init(0),
        mesh=Mesh(np.array(jax.devices()[:1]), ("data",)),
        buckets=buckets,
        vocab_chunk=16,
    )
    return scorer, buckets


def _plan(buckets, n=12):
    from jaxeval.lm.encoding import truncate_request
    from jaxeval.lm.score.planner import plan_score_batches

    rng = np.random.default_rng(0)
    pairs = [
        (list(rng.integers(1, 90, size=int(rng.integers(3, 25)))), [int(rng.integers(1, 90))])
        for _ in range(n)
    ]
    reqs = [truncate_request(c, x, 32) for c, x in pairs]
    return plan_score_batches(reqs, buckets, packing=True, shared_context=False)


def test_run_plan_yields_each_batch_one_behind_the_device(toy_scorer, monkeypatch):
    scorer, buckets = toy_scorer
    plan = _plan(buckets)
    assert len(plan.batches) >= 3
    events = []
    compiled = scorer.compiled

    def watched(bucket):
        fn = compiled(bucket)
        return lambda *args: (events.append("dispatch"), fn(*args))[1]

    monkeypatch.setattr(scorer, "compiled", watched)
    batches = []
    for answers in scorer.run_plan(plan):
        events.append("yield")
        batches.append(answers)
    n = len(plan.batches)
    assert events == ["dispatch", "dispatch"] + ["yield", "dispatch"] * (n - 2) + ["yield"] * 2
    assert all(a.ran for a in batches)
    assert [a.real_tokens for a in batches] == [b.real_tokens for b in plan.batches]
    loglik, _ = answer_arrays(batches, plan.n_requests)
    assert np.isfinite(loglik).all()

    # skipping: batches whose requests are all known do not run and come back as `not_run`
    first = set(plan.batches[0].slot_request[plan.batches[0].slot_request >= 0].tolist())
    again = list(scorer.run_plan(plan, skip=lambda idx: set(idx.tolist()) <= first))
    assert [a.ran for a in again] == [False] + [True] * (n - 1)
    assert again[0].real_tokens == 0 and np.isnan(again[0].loglik).all()
    loglik2, _ = answer_arrays(again[1:], plan.n_requests)
    rest = sorted(set(range(plan.n_requests)) - first)
    np.testing.assert_array_equal(loglik2[rest], loglik[rest])  # the same batches, bit for bit


def test_run_plan_asserts_every_request_answered_once(toy_scorer):
    import dataclasses

    scorer, buckets = toy_scorer
    plan = _plan(buckets)
    doubled = dataclasses.replace(plan, batches=plan.batches + plan.batches[:1])
    with pytest.raises(AssertionError, match="answered"):
        list(scorer.run_plan(doubled))


# ---- the keywords on JaxLM -------------------------------------------------------------------


@pytest.mark.slow
def test_jax_lm_returns_known_answers_and_hands_on_the_rest(tmp_path):
    from jaxeval.lm.jax_lm import JaxLM
    from tests.helpers.tiny_models import make_tiny_checkpoint

    ckpt = make_tiny_checkpoint("llama", str(tmp_path / "llama"), seed=3)
    lm = JaxLM(pretrained=ckpt, dtype="float32", mesh="single", max_length=64, token_budget=64)
    words = ("red", "big", "old", "new")
    reqs = [
        Instance("loglikelihood", {}, (f"Item {k}: the {w} is", f" {w}"), i)
        for i, (k, w) in enumerate((k, w) for k in range(3) for w in words)
    ]
    plain = lm.loglikelihood(reqs)
    got: dict[int, tuple[float, bool]] = {}
    known = {0: (-1.0, True), 5: (-2.0, False)}
    out = lm.loglikelihood(reqs, known=known, on_answers=lambda p, a: got.update(zip(p, a)))
    assert out == [known.get(i, plain[i]) for i in range(len(reqs))]
    assert set(got) >= set(range(len(reqs))) - set(known)
    assert all(got[i] == plain[i] for i in got)  # bit for bit, the batches being the same

    docs = [Instance("loglikelihood_rolling", {}, (" ".join(words * k),), k) for k in (1, 6, 12)]
    totals = lm.loglikelihood_rolling(docs)
    seen: dict[int, float] = {}
    out = lm.loglikelihood_rolling(
        docs, known={1: -5.0}, on_answers=lambda d, t: seen.update(zip(d, t))
    )
    assert out == [totals[0], -5.0, totals[2]]
    assert {0, 2} <= set(seen) and all(seen[d] == totals[d] for d in seen)

    gen = [
        Instance("generate_until", {}, (f"Say {w}:", {"until": ["\n"], "max_gen_toks": 4}), i)
        for i, w in enumerate(words)
    ]
    texts = lm.generate_until(gen)
    handed: dict[int, str] = {}
    out = lm.generate_until(
        gen, known={2: "stored"}, on_answers=lambda p, t: handed.update(zip(p, t))
    )
    assert out == [texts[0], texts[1], "stored", texts[3]]
    assert handed == {0: texts[0], 1: texts[1], 3: texts[3]}
