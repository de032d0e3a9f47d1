"""`--use_cache` survives SIGKILL; runs are deterministic.

* In process: CachingLM over a JaxLM commits once per kernel batch (loglikelihood, rolling,
  generation), the stored answers equal the returned ones, and a changed fingerprint is a miss.
* In process: a call interrupted after one committed batch, then resumed, returns exactly the
  answers of an uninterrupted call and computes only what was not committed.
* Subprocesses: an evaluation is SIGKILLed as soon as its cache holds a committed batch; the rerun
  serves every committed row from the file and computes exactly the rest (the counter
  `config.response_cache` = {"served": rows on file, "computed": the rest} proves it), and writes
  the same results and samples as an uninterrupted run. Two uninterrupted runs write byte-identical results JSON once
  the wall-clock fields are removed.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxeval.api.instance import Instance
from jaxeval.cache import CachingLM, ResponseStore

REPO = Path(__file__).resolve().parents[2]
MODEL_ARGS = "dtype=float32,mesh=single,max_length=128,token_budget=256"
TASKS = "arc_easy,lambada_openai"
# Wall-clock values: the only fields allowed to differ between two runs of the same evaluation.
TIME_FIELDS = ("date", "total_evaluation_time_seconds", "timing")  # wall-clock figures
TIME_STATS = ("compile_s", "plan_s", "run_s", "first_batch_s")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from tests.helpers.tiny_models import make_tiny_checkpoint

    return make_tiny_checkpoint("llama", str(tmp_path_factory.mktemp("resume_llama")), seed=3)


def _ll(*pairs):
    return [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]


class CountingStore(ResponseStore):
    """A response store that records how many rows each commit wrote."""

    def __init__(self, path):
        super().__init__(path)
        self.commits: list[int] = []

    def put(self, rows):
        if rows:
            self.commits.append(len(rows))
        super().put(rows)


@pytest.mark.slow
def test_answers_are_committed_batch_by_batch(tmp_path, ckpt):
    from jaxeval.lm.jax_lm import JaxLM

    lm = JaxLM(pretrained=ckpt, dtype="float32", mesh="single", max_length=64, token_budget=64)
    store = CountingStore(str(tmp_path / "c.db"))
    cached = CachingLM(lm, store)
    words = ["alpha beta", "gamma", "delta epsilon zeta", "eta", "theta iota", "kappa"]
    reqs = _ll(*[(f"The word {k} is {w} and then", f" {w}") for k in range(3) for w in words])
    got = cached.loglikelihood(reqs)
    assert len(store.commits) == lm.stats["batches"] > 1  # one transaction per kernel batch
    assert sum(store.commits) == len(reqs)
    again = CachingLM(lm, ResponseStore(store.path), full_plan=True)
    assert again.loglikelihood(reqs) == got and again.computed["loglikelihood"] == 0

    rolling = [Instance("loglikelihood_rolling", {}, (" ".join(words * k),), k) for k in (1, 4, 9)]
    store.commits.clear()
    totals = cached.loglikelihood_rolling(rolling)
    assert store.commits and sum(store.commits) == len(rolling)
    assert CachingLM(lm, ResponseStore(store.path)).loglikelihood_rolling(rolling) == totals

    gen = [
        Instance("generate_until", {}, (f"Say {w}:", {"until": ["\n"], "max_gen_toks": 4}), i)
        for i, w in enumerate(words)
    ]
    store.commits.clear()
    texts = cached.generate_until(gen)
    assert sum(store.commits) == len(gen)
    assert CachingLM(lm, ResponseStore(store.path)).generate_until(gen) == texts


class _Killed(Exception):
    pass


class _DyingStore(ResponseStore):
    """Commits `lives` batches, then dies in the middle of the next commit (nothing written)."""

    def __init__(self, path, lives):
        super().__init__(path)
        self.lives = lives

    def put(self, rows):
        if rows and self.lives == 0:
            raise _Killed
        self.lives -= bool(rows)
        super().put(rows)


@pytest.mark.slow
def test_interrupted_call_resumes_with_the_same_answers(tmp_path, ckpt):
    from jaxeval.lm.jax_lm import JaxLM

    lm = JaxLM(pretrained=ckpt, dtype="float32", mesh="single", max_length=64, token_budget=64)
    reqs = _ll(*[(f"Item {k}: the {w} is", f" {w}") for k in range(5) for w in ("red", "big")])
    want = lm.loglikelihood(reqs)
    assert lm.stats["batches"] >= 3
    path = str(tmp_path / "c.db")
    with pytest.raises(_Killed):
        CachingLM(lm, _DyingStore(path, lives=1), full_plan=True).loglikelihood(reqs)
    kept = ResponseStore(path).count()
    assert 0 < kept < len(reqs)
    resumed = CachingLM(lm, ResponseStore(path), full_plan=True)
    assert resumed.loglikelihood(reqs) == want  # bit for bit: the same batches were recomputed
    assert resumed.cache_stats() == {"served": kept, "computed": len(reqs) - kept}


def test_fingerprint_follows_the_weights_files(tmp_path, ckpt):
    import shutil

    from jaxeval.lm.jax_lm import JaxLM

    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt, copy)
    lm = JaxLM(pretrained=str(copy), dtype="float32", mesh="single", max_length=64)
    before = lm.fingerprint()
    assert lm.fingerprint() == before  # stable
    weights = copy / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert lm.fingerprint() != before  # new weights under the same path: a new key space


def test_other_weights_never_read_stale_answers(tmp_path, caplog):
    class Model:
        def __init__(self, tag, value):
            self.tag, self.value, self.sent = tag, value, 0

        def fingerprint(self):
            return self.tag

        def loglikelihood(self, requests):
            self.sent += len(requests)
            return [(self.value, True)] * len(requests)

    path = str(tmp_path / "c.db")
    reqs = _ll(("a", " b"), ("c", " d"))
    assert CachingLM(Model("old", -1.0), path).loglikelihood(reqs) == [(-1.0, True)] * 2
    new = Model("new", -2.0)
    with caplog.at_level("WARNING", logger="jaxeval.cache"):
        assert CachingLM(new, path).loglikelihood(reqs) == [(-2.0, True)] * 2
    assert new.sent == 2 and "answers from other weights" in caplog.text


# -- subprocess runs -------------------------------------------------------------------------------


def _command(ckpt: str, out: Path, cache: Path | None) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "jaxeval.cli",
        "run",
        "--model",
        "jax",
        "--model_args",
        f"pretrained={ckpt},{MODEL_ARGS}",
        "--tasks",
        TASKS,
        "--data_dir",
        str(REPO / "tests" / "data"),
        "--output_path",
        str(out),
        "--log_samples",
        "--bootstrap_iters",
        "0",
    ]
    return cmd + (["--use_cache", str(cache)] if cache else [])


def _env() -> dict:
    return {**os.environ, "JAXEVAL_COMPILATION_CACHE": "off", "XLA_FLAGS": ""}


def _run(ckpt, out, cache=None) -> tuple[dict, dict[str, list[dict]]]:
    proc = subprocess.run(
        _command(ckpt, out, cache),
        env=_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = out.rglob("results_*.json")
    samples = {
        p.name.split("_20")[0]: [json.loads(x) for x in p.read_text().splitlines()]
        for p in out.rglob("samples_*.jsonl")
    }
    return json.loads(results.read_text()), samples


def _rows(db: Path) -> int:
    con = sqlite3.connect(db, timeout=5)
    try:
        return con.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
    except sqlite3.OperationalError:  # the table is not created yet
        return 0
    finally:
        con.close()


def _without_times(results: dict) -> dict:
    out = {k: v for k, v in results.items() if k not in TIME_FIELDS}
    stats = dict(out["config"]["scoring_stats"])
    for key in TIME_STATS:
        stats.pop(key, None)
    config = {k: v for k, v in out["config"].items() if k != "timing"}
    out["config"] = {**config, "scoring_stats": stats}
    return out


@pytest.fixture(scope="module")
def uninterrupted(ckpt, tmp_path_factory):
    return _run(ckpt, tmp_path_factory.mktemp("plain") / "out")


@pytest.mark.slow
def test_sigkill_then_resume_recomputes_no_finished_batch(ckpt, tmp_path, uninterrupted):
    cache = tmp_path / "cache" / "lm"
    db = Path(f"{cache}_rank0.db")
    proc = subprocess.Popen(
        _command(ckpt, tmp_path / "killed", cache),
        env=_env(),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if db.exists() and _rows(db) > 0:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert not list((tmp_path / "killed").rglob("results_*.json"))
    kept = _rows(db)
    want, want_samples = uninterrupted
    total = want["config"]["scoring_stats"]["requests"]
    assert 0 < kept < total  # killed mid-run, with finished batches on disk
    print(f"SIGKILL with {kept} of {total} answers committed")

    resumed, samples = _run(ckpt, tmp_path / "resumed", cache)
    # the model saw only what the file lacked: no committed answer was computed again
    assert resumed["config"]["response_cache"] == {"served": kept, "computed": total - kept}
    assert _rows(db) == total
    assert resumed["results"] == want["results"]
    assert samples == want_samples


@pytest.mark.slow
def test_two_runs_write_identical_results(ckpt, tmp_path, uninterrupted):
    first, first_samples = uninterrupted
    second, second_samples = _run(ckpt, tmp_path / "again")
    dump = lambda r: json.dumps(_without_times(r), indent=2, sort_keys=True)  # noqa: E731
    assert dump(first) == dump(second)
    assert second_samples == first_samples
