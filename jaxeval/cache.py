"""`--use_cache PREFIX`: a response cache that survives SIGKILL, keyed by the model and the request.

    key   = sha256(json.dumps([fingerprint, "loglikelihood", "ctx", " cont"]))
    value = json.dumps([ll, is_greedy])            (a float for rolling, a string for generation)

One sqlite file in WAL mode (`PREFIX_rank0.db`). Rows are committed batch by batch as the kernel
returns them: a model that defines `answer_hook` (JaxLM) calls it with (positions, answers) after
each kernel batch, and each call is one transaction. A run killed at any point keeps every finished
batch; its rerun serves those from the file and recomputes at most the batch that was in flight.
Models without the hook are stored when their call returns.

The fingerprint names what produced an answer: the model's `fingerprint()` (JaxLM: its files,
config, spec, tokenizer and every model argument that can change an answer, `jaxeval.lm.fingerprint`),
else its class. A row is served only under its key and its fingerprint; a file holding rows of
other fingerprints gets a warning counting them. A stored value is checked before it is served
(`checked_answer`): a malformed, non-finite or wrongly typed one is a miss, computed again and
replaced, with a warning once. Sampled generations are never stored. Values are JSON (not
pickles), so a cache file is safe to share. Multi-host: only process 0 opens the file
(`response_cache`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sqlite3
from collections.abc import Sequence
from typing import Any

from jaxeval.api.instance import Instance
from jaxeval.errors import JaxevalError
from jaxeval.platform import distributed

log = logging.getLogger(__name__)
METHODS = ("loglikelihood", "loglikelihood_rolling", "generate_until")


def _finite_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond float range
        return False


def checked_answer(method: str, text: str) -> Any:
    """A stored JSON value as `method` returns it, or None if it is not one.

    loglikelihood          '[-3.25, false]' -> (-3.25, False)     '[NaN, false]', '[-1, 0]' -> None
    loglikelihood_rolling  '-153.5' -> -153.5                     'Infinity', '"x"' -> None
    generate_until         '" Paris"' -> " Paris"                 '3', 'not json' -> None
    """
    try:
        value = json.loads(text)
    except (TypeError, ValueError):  # malformed JSON, or not text at all
        return None
    if method == "loglikelihood":
        ok = isinstance(value, list) and len(value) == 2
        if ok and _finite_number(value[0]) and isinstance(value[1], bool):
            return (float(value[0]), value[1])
        return None
    if method == "loglikelihood_rolling":
        return float(value) if _finite_number(value) else None
    return value if isinstance(value, str) else None


def fingerprint_of(**parts: Any) -> str:
    """A short stable hash of JSON-able parts."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def model_fingerprint(lm: Any) -> str:
    fingerprint = getattr(lm, "fingerprint", None)
    if callable(fingerprint):
        return str(fingerprint())
    return f"{type(lm).__module__}.{type(lm).__qualname__}"


def hash_args(fingerprint: str, method: str, args: tuple) -> str:
    return hashlib.sha256(json.dumps([fingerprint, method, *args]).encode("utf-8")).hexdigest()


class ResponseStore:
    """The sqlite file: opened (and proven writable) before the model loads."""

    def __init__(self, path: str):
        self.path = path
        self._warned_unusable = False
        hint = "give --use_cache a prefix in a writable directory, e.g. --use_cache cache/run"
        folder = os.path.dirname(path)
        try:
            if folder:
                os.makedirs(folder, exist_ok=True)
            if os.path.isdir(path):
                raise OSError(f"{path} is a directory")
            self._db = sqlite3.connect(path, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, model TEXT, value TEXT)"
            )
            self._db.execute("BEGIN IMMEDIATE")  # proves the file (and its -wal) can be written
            self._db.execute("ROLLBACK")
        except (OSError, sqlite3.Error) as e:
            raise JaxevalError(
                f"the response cache cannot be opened for writing ({e})",
                file=path,
                field="use_cache",
                hint=hint,
            ) from None

    def get(self, key: str, model: str, method: str) -> Any:
        """The answer stored under `key` by `model` (a fingerprint), as `method` returns it; None
        when there is none, or when the stored value is not one (a warning, once per file)."""
        row = self._db.execute(
            "SELECT value FROM answers WHERE key = ? AND model = ?", (key, model)
        ).fetchone()
        if row is None:
            return None
        value = checked_answer(method, row[0])
        if value is None and not self._warned_unusable:
            self._warned_unusable = True
            log.warning(
                "%s holds an unusable %s answer (%.60s: malformed, not finite or of the wrong "
                "type); such answers are computed again and replaced (shown once)",
                self.path,
                method,
                row[0],
            )
        return value

    def put(self, rows: list[tuple[str, str, Any]]) -> None:
        """(key, fingerprint, value) rows in one committed transaction."""
        if rows:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO answers VALUES (?, ?, ?)",
                    [(k, m, json.dumps(v)) for k, m, v in rows],
                )

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])

    def warn_if_other_models(self, fingerprint: str) -> None:
        other = self._db.execute(
            "SELECT COUNT(*) FROM answers WHERE model != ?", (fingerprint,)
        ).fetchone()[0]
        if other:
            log.warning(
                "%s holds %d answers from other weights, tokenizer or settings (stored under "
                "another fingerprint); none of them is served to this run, whose answers are "
                "stored beside them",
                self.path,
                other,
            )


def innermost(lm: Any) -> Any:
    """The model under any wrappers that hold it as `.lm` (the object a fingerprint describes)."""
    for _ in range(8):
        inner = getattr(lm, "__dict__", {}).get("lm")
        if inner is None:
            return lm
        lm = inner
    return lm


def hook_target(lm: Any) -> Any:
    """The object (lm, or one it wraps as `.lm`) whose class offers `answer_hook`, else None."""
    seen = 0
    while lm is not None and seen < 8:
        if "answer_hook" in dir(type(lm)):
            return lm
        lm, seen = getattr(lm, "__dict__", {}).get("lm"), seen + 1
    return None


def _cacheable(method: str, req: Instance) -> bool:
    return not (method == "generate_until" and req.args[1].get("do_sample", False))


class CachingLM:
    """Wraps an LM; the three request methods consult the store first and fill it batch by batch.

    With `full_plan` (one process) and a model that takes `known_answers` (JaxLM), a scoring call
    with some answers on file still sends the model every request, with the stored ones as known
    answers: the model plans exactly the batches the interrupted run planned and runs only those
    holding an unknown request, so the resumed results equal an uninterrupted run's bit for bit.
    Otherwise (generation, other models, several processes) only the misses are sent.

    `served` / `computed` count the requests answered from the file / by the model, per method.
    """

    def __init__(self, lm: Any, store: ResponseStore | str, *, full_plan: bool = False):
        self.lm = lm
        self.store = store if isinstance(store, ResponseStore) else ResponseStore(store)
        self.path = self.store.path
        self.fingerprint = model_fingerprint(innermost(lm))
        self.store.warn_if_other_models(self.fingerprint)
        self.full_plan = full_plan
        self.served = dict.fromkeys(METHODS, 0)
        self.computed = dict.fromkeys(METHODS, 0)

    def cache_stats(self) -> dict[str, int]:
        return {"served": sum(self.served.values()), "computed": sum(self.computed.values())}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.lm, name)
        if name not in METHODS:
            return attr

        def call(requests: list[Instance]) -> list[Any]:
            out: list[Any] = [None] * len(requests)
            known: dict[int, Any] = {}
            for i, req in enumerate(requests):
                if _cacheable(name, req):
                    key = hash_args(self.fingerprint, name, req.args)
                    hit = self.store.get(key, self.fingerprint, name)
                    if hit is not None:
                        known[i] = out[i] = hit
            self.served[name] += len(known)
            if len(known) == len(requests):
                return out
            target = hook_target(self.lm)
            full = (
                self.full_plan
                and name != "generate_until"
                and target is not None
                and "known_answers" in dir(type(target))
            )
            sent = list(range(len(requests))) if full else out_missing(out, known)
            done: set[int] = set(known) if full else set()

            def store(positions: list[int], answers: list[Any]) -> None:
                rows = []
                for p, value in zip(positions, answers):
                    i = sent[p]
                    if i not in done and _cacheable(name, requests[i]):
                        key = hash_args(self.fingerprint, name, requests[i].args)
                        rows.append((key, self.fingerprint, value))
                    if i not in done:
                        self.computed[name] += 1
                    done.add(i)
                self.store.put(rows)

            if target is not None:
                target.answer_hook = store
                if full:
                    target.known_answers = known
            try:
                fresh = attr([requests[i] for i in sent])
            finally:
                if target is not None:
                    target.answer_hook = None
                    if full:
                        target.known_answers = None
            rest = [p for p, i in enumerate(sent) if i not in done]
            store(rest, [fresh[p] for p in rest])
            for p, i in enumerate(sent):
                if i not in known:
                    out[i] = fresh[p]
            return out

        return call


def out_missing(out: list[Any], known: dict[int, Any]) -> list[int]:
    """Positions without a stored answer, in order."""
    return [i for i in range(len(out)) if i not in known]


_METHODS = ("loglikelihood", "loglikelihood_rolling", "generate_until")


# ---- --use_cache with several processes ---------------------------------------------------------
def response_cache(lm: Any, path: str) -> Any:
    """`--use_cache` wrapper: process 0 owns the sqlite file; the others run what it runs.

    Cache hits differ between processes unless they share the file, and every process must run the
    same requests, so process 0 decides: it broadcasts the positions of the requests it sends to the
    model, and the other processes send exactly those. Only process 0 opens (and writes) the file;
    the others' answers are placeholders (their results are discarded).
    """
    if (
        distributed.process_count() == 1
    ):  # alone: a resumed call replans everything and skips stored batches
        return CachingLM(lm, path, full_plan=True)
    if distributed.is_main_process():
        return _CacheLeader(lm, path)
    return _CacheFollower(lm)


def subsequence_positions(subset: Sequence[Any], full: Sequence[Any]) -> list[int]:
    """Positions in `full` of the objects of `subset`, matched by identity, in order.

    full = [a, a, b, c], subset = [a, a, c] -> [0, 1, 3]
    """
    out, j = [], 0
    for item in subset:
        while j < len(full) and full[j] is not item:
            j += 1
        if j == len(full):
            raise AssertionError("the cache sent the model a request that was not asked for")
        out.append(j)
        j += 1
    return out


class _Intercept:
    """Passes every attribute through to `lm`, except the three request methods, which go to
    `self.call(name, requests)`."""

    def __init__(self, lm: Any):
        self.lm = lm

    def __getattr__(self, name: str) -> Any:
        if name not in _METHODS:
            return getattr(self.lm, name)
        return lambda requests: self.call(name, requests)

    def call(self, name: str, requests: list[Any]) -> list[Any]:
        raise NotImplementedError


class _Tap(_Intercept):
    """Between CachingLM and the model on process 0: announces which requests really run."""

    def __init__(self, lm: Any):
        super().__init__(lm)
        self.full: Sequence[Any] = ()
        self.sent = False

    def call(self, name: str, requests: list[Any]) -> list[Any]:
        distributed.broadcast_json(subsequence_positions(requests, self.full))
        self.sent = True
        return getattr(self.lm, name)(requests)


class _CacheLeader(_Intercept):
    def __init__(self, lm: Any, path: str):
        super().__init__(lm)
        self._tap = _Tap(lm)
        self._cache = CachingLM(self._tap, path)

    def call(self, name: str, requests: list[Any]) -> list[Any]:
        self._tap.full, self._tap.sent = list(requests), False
        out = getattr(self._cache, name)(requests)
        if not self._tap.sent:  # every request was a hit: tell the others to run nothing
            distributed.broadcast_json([])
        return out


class _CacheFollower(_Intercept):
    def call(self, name: str, requests: list[Any]) -> list[Any]:
        todo = distributed.broadcast_json()
        if todo:
            getattr(self.lm, name)([requests[i] for i in todo])
        return [None] * len(requests)
