"""The host-side agreements of a multi-process run, simulated in one process (no JAX collectives).

--use_cache: process 0 (leader) looks requests up, announces the positions it sends to the model;
             process 1 (follower) sends exactly those, so both run the same kernels.
plans:       a digest per plan; processes whose digests differ fail loudly instead of hanging.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxeval import cache
from jaxeval.api.instance import Instance
from jaxeval.errors import JaxevalError
from jaxeval.platform import distributed


class CountingLM:
    """Answers loglikelihood / generate_until deterministically and records what it was sent."""

    def __init__(self):
        self.sent: list[list[tuple]] = []
        self.rank, self.world_size = 0, 1

    def loglikelihood(self, requests):
        self.sent.append([r.args for r in requests])
        return [(-float(len(r.args[1])), True) for r in requests]

    def loglikelihood_rolling(self, requests):
        self.sent.append([r.args for r in requests])
        return [-1.0 for _ in requests]

    def generate_until(self, requests):
        self.sent.append([r.args for r in requests])
        return [r.args[0][::-1] for r in requests]


def _ll(*conts: str) -> list[Instance]:
    return [Instance("loglikelihood", {}, ("ctx", c), i) for i, c in enumerate(conts)]


def _as(monkeypatch, *, main: bool, messages: list) -> None:
    """Makes this process look like process 0 (main) or 1 of 2, with broadcasts through `messages`."""
    monkeypatch.setattr(distributed, "process_count", lambda: 2)
    monkeypatch.setattr(distributed, "is_main_process", lambda: main)

    def broadcast(obj=None):
        if main:
            messages.append(obj)
            return obj
        return messages.pop(0)

    monkeypatch.setattr(distributed, "broadcast_json", broadcast)


def test_subsequence_positions_by_identity():
    a, b, c = object(), object(), object()
    assert cache.subsequence_positions([a, a, c], [a, a, b, c]) == [0, 1, 3]
    assert cache.subsequence_positions([], [a]) == []
    with pytest.raises(AssertionError):
        cache.subsequence_positions([b, a], [a, b])


@pytest.mark.parametrize("warm", [(), ("x",), ("x", "zz"), ("x", "zz", "yyy")])
def test_cache_follower_runs_exactly_the_leaders_misses(tmp_path, monkeypatch, warm):
    from jaxeval.cache import CachingLM

    path = str(tmp_path / "cache.db")
    if warm:
        CachingLM(CountingLM(), path).loglikelihood(_ll(*warm))
    requests = _ll("x", "yyy", "zz", "x")
    messages: list = []

    _as(monkeypatch, main=True, messages=messages)
    leader_model = CountingLM()
    leader = cache.response_cache(leader_model, path)
    answers = leader.loglikelihood(requests)
    assert answers == [(-1.0, True), (-3.0, True), (-2.0, True), (-1.0, True)]

    _as(monkeypatch, main=False, messages=messages)
    follower_model = CountingLM()
    follower = cache.response_cache(follower_model, str(tmp_path / "never.db"))
    assert follower.loglikelihood(requests) == [None] * 4
    assert messages == []  # every broadcast was received
    assert follower_model.sent == leader_model.sent  # the same model calls (none when all hit)
    assert not (tmp_path / "never.db").exists()
    misses = [c for c in ("x", "yyy", "zz", "x") if c not in warm]
    assert [a[1] for call in leader_model.sent for a in call] == misses


def test_check_same_names_the_odd_process(monkeypatch):
    from jax.experimental import multihost_utils

    monkeypatch.setattr(distributed, "process_count", lambda: 3)
    digest = distributed.fingerprint([np.arange(4)])
    other = distributed.fingerprint([np.arange(5)])
    gathered = np.stack([np.frombuffer(d, np.uint8) for d in (digest, digest, other)])
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda x: gathered)
    with pytest.raises(JaxevalError, match=r"process\(es\) \[2\]"):
        distributed.check_same("loglikelihood plan", digest)
    same = np.stack([np.frombuffer(digest, np.uint8)] * 3)
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda x: same)
    distributed.check_same("loglikelihood plan", digest)


def test_fingerprint_sees_dtype_shape_and_values():
    base = distributed.fingerprint([np.zeros((2, 3), np.int32)])
    assert base == distributed.fingerprint([np.zeros((2, 3), np.int32)])
    assert base != distributed.fingerprint([np.zeros((3, 2), np.int32)])
    assert base != distributed.fingerprint([np.zeros((2, 3), np.int64)])
    assert base != distributed.fingerprint([np.ones((2, 3), np.int32)])


def test_who_reports():
    from jaxeval.evaluator import reports_results as is_main_process

    lm = CountingLM()
    assert is_main_process(lm)  # no is_main_process attribute: rank 0 reports
    lm.rank = 1
    assert not is_main_process(lm)
    lm.rank, lm.is_main_process = 0, False
    assert not is_main_process(lm)


@pytest.mark.parametrize("main", [True, False])
def test_only_the_main_process_reports_and_writes_caches(tmp_path, monkeypatch, data_root, main):
    from jaxeval.api.task_manager import TaskManager
    from jaxeval.evaluator import simple_evaluate
    from tests.api import fake_lm

    monkeypatch.setenv("JAXEVAL_CACHE_PATH", str(tmp_path / "requests"))
    log = fake_lm.RequestLog()
    lm = fake_lm.make_jaxeval_lm(log)
    type(lm).is_main_process = property(lambda self: main)
    out = simple_evaluate(
        model=lm,
        tasks=["arc_easy"],
        limit=3,
        cache_requests=True,
        task_manager=TaskManager(data_dir=str(data_root)),
        bootstrap_iters=0,
    )
    assert len(log.calls["loglikelihood"]) == 12  # the same requests run either way
    written = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    if main:
        assert out["results"]["arc_easy"]["acc,none"] is not None
        assert len(written) == 1 and written[0].startswith("requests-arc_easy-")
    else:
        assert out is None and written == []
