"""`--use_cache PREFIX`: a response cache that survives SIGKILL, keyed by the model and the request.

    key   = sha256(json.dumps([fingerprint, "loglikelihood", "ctx", " cont"]))
    value = json.dumps([ll, is_greedy])            (a float for rolling, a string for generation)

One sqlite file in WAL mode (`PREFIX_rank0.db`). Rows are committed batch by batch as the kernel
returns them: a model whose request methods take the keywords `known` and `on_answers`
(`takes_answers`: JaxLM, the in-memory LM) is called with `on_answers=store`, which it calls with
(positions, answers) after each kernel batch, and each call is one transaction. A run killed at any
point keeps every finished batch; its rerun serves those from the file and recomputes at most the
batch that was in flight. Other models' answers are stored when their call returns.

The fingerprint names what produced an answer: the model's `fingerprint()` (JaxLM: its files,
config, spec, tokenizer and every model argument that can change an answer, `jaxeval.lm.fingerprint`),
else its class. A row is served only under its key and its fingerprint; a file holding rows of
other fingerprints gets a warning counting them. A stored value is checked before it is served
(`checked_answer`): a malformed, non-finite or wrongly typed one is a miss, computed again and
replaced, with a warning once. Sampled generations are never stored. Values are JSON (not
pickles), so a cache file is safe to share. Multi-host: only process 0 opens the file
(`response_cache`).

The cache fails soft: only a file that cannot be opened for writing at all is an error (before the
model loads). Any sqlite error after that, such as a damaged page, an `answers` table of another
schema or a disk that fills mid-run, is one warning; the file is then left alone and the run goes
on without it (every answer computed, none stored), with the same results. When the store is
closed (`close`, or at exit) its write-ahead log is checkpointed into the file
(`PRAGMA wal_checkpoint(TRUNCATE)`), so the `.db` file alone holds every answer.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import math
import os
import sqlite3
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from jaxeval.api.instance import Instance
from jaxeval.errors import JaxevalError
from jaxeval.platform import distributed

log = logging.getLogger(__name__)
METHODS = ("loglikelihood", "loglikelihood_rolling", "generate_until")
ANSWER_KEYWORDS = ("known", "on_answers")


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


COLUMNS = ("key", "model", "value")


def _make_folders(folder: str) -> None:
    """`os.makedirs`, each new folder 0755 less the umask: never writable by group or others, even
    under umask 000 (sqlite makes the file and its -wal 0644 less the umask)."""
    parent = os.path.dirname(folder)
    if parent and parent != folder and not os.path.exists(parent):
        _make_folders(parent)
    try:
        os.mkdir(folder, 0o755)
    except FileExistsError:
        pass


def _close_connection(db: sqlite3.Connection) -> None:
    """Checkpoints the write-ahead log into the file (emptying the `-wal`), then closes."""
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error:
        pass  # the rows stay in the -wal, which sqlite reads back on the next open
    finally:
        db.close()


class ResponseStore:
    """The sqlite file: opened (and proven writable) before the model loads."""

    def __init__(self, path: str):
        self.path = path
        self._warned_unusable = False
        self._db: sqlite3.Connection | None = None
        hint = "give --use_cache a prefix in a writable directory, e.g. --use_cache cache/run"
        folder = os.path.dirname(path)
        try:
            if folder:
                _make_folders(folder)
            if os.path.isdir(path):
                raise OSError(f"{path} is a directory")
            db = sqlite3.connect(path, timeout=30)
            self._closer = weakref.finalize(self, _close_connection, db)
            self._db = db
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, model TEXT, value TEXT)"
            )
            columns = tuple(row[1] for row in db.execute("PRAGMA table_info(answers)"))
            db.execute("BEGIN IMMEDIATE")  # proves the file (and its -wal) can be written
            db.execute("ROLLBACK")
        except (OSError, sqlite3.OperationalError) as e:
            self.close()
            raise JaxevalError(
                f"the response cache cannot be opened for writing ({e})",
                file=path,
                field="use_cache",
                hint=hint,
            ) from None
        except sqlite3.Error as e:  # not a database, or a damaged one: the run goes on without it
            self._fail(e)
            return
        if columns != COLUMNS:
            self._fail(f"its answers table has the columns {list(columns)}, not {list(COLUMNS)}")

    def _fail(self, error: object) -> None:
        """Stops using the file after an sqlite error (one warning): from here on nothing is
        served or stored, and the run computes every answer."""
        if self._db is None:
            return
        self.close()
        log.warning(
            "the response cache %s cannot be used (%s); the run goes on without it: answers are "
            "computed and not stored",
            self.path,
            error,
        )

    def close(self) -> None:
        """Checkpoints the write-ahead log into the file and closes it (also done at exit)."""
        self._db = None
        closer = getattr(self, "_closer", None)
        if closer is not None:
            closer()

    def get(self, key: str, model: str, method: str) -> Any:
        """The answer stored under `key` by `model` (a fingerprint), as `method` returns it; None
        when there is none, or when the stored value is not one (a warning, once per file)."""
        if self._db is None:
            return None
        try:
            row = self._db.execute(
                "SELECT value FROM answers WHERE key = ? AND model = ?", (key, model)
            ).fetchone()
        except sqlite3.Error as e:
            self._fail(e)
            return None
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
        """(key, fingerprint, value) rows in one committed transaction (none once the file failed)."""
        if rows and self._db is not None:
            try:
                with self._db:
                    self._db.executemany(
                        "INSERT OR REPLACE INTO answers VALUES (?, ?, ?)",
                        [(k, m, json.dumps(v)) for k, m, v in rows],
                    )
            except sqlite3.Error as e:
                self._fail(e)

    def count(self) -> int:
        if self._db is None:
            return 0
        try:
            return int(self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])
        except sqlite3.Error as e:
            self._fail(e)
            return 0

    def warn_if_other_models(self, fingerprint: str) -> None:
        if self._db is None:
            return
        try:
            other = self._db.execute(
                "SELECT COUNT(*) FROM answers WHERE model != ?", (fingerprint,)
            ).fetchone()[0]
        except sqlite3.Error as e:
            self._fail(e)
            return
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


def takes_answers(method: Callable[..., Any]) -> bool:
    """Whether a request method takes `known` and `on_answers` by keyword (read from its signature,
    so a subclass or wrapper that drops them is called without them).

        def loglikelihood(self, requests, disable_tqdm=False, *, known=None, on_answers=None)  True
        def loglikelihood(self, requests)                                                    False
    """
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return False
    by_keyword = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return all(name in params and params[name].kind in by_keyword for name in ANSWER_KEYWORDS)


def _cacheable(method: str, req: Instance) -> bool:
    return not (method == "generate_until" and req.args[1].get("do_sample", False))


class CachingLM:
    """Wraps an LM; the three request methods consult the store first and fill it batch by batch.

    With `full_plan` (one process) and a model whose method `takes_answers` (JaxLM), a call with
    some answers on file still sends the model every request, with the stored ones as
    `known={position: answer}`: a scoring call plans exactly the batches the interrupted run
    planned and runs only those holding an unknown request, so the resumed results equal an
    uninterrupted run's bit for bit. Otherwise (other models, several processes) only the misses
    are sent. The answers come back through the call's `on_answers` keyword and its return value.

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
            takes = takes_answers(attr)
            full = self.full_plan and takes
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

            keywords: dict[str, Any] = {"on_answers": store} if takes else {}
            if full:
                keywords["known"] = known
            fresh = attr([requests[i] for i in sent], **keywords)
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
    """Between CachingLM and the model on process 0: announces which requests really run. Its
    request methods show the model's signature, so CachingLM passes the keywords the model takes
    (`takes_answers`) and the model commits its answers batch by batch."""

    def __init__(self, lm: Any):
        super().__init__(lm)
        self.full: Sequence[Any] = ()
        self.sent = False

    def expect(self, requests: Sequence[Any]) -> None:
        """The next call answers `requests` (those the model is sent are a subsequence)."""
        self.full, self.sent = list(requests), False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.lm, name)
        if name not in _METHODS:
            return method

        @functools.wraps(method)
        def tapped(requests: list[Any], **answers: Any) -> list[Any]:
            distributed.broadcast_json(subsequence_positions(requests, self.full))
            self.sent = True
            return method(requests, **answers)

        return tapped


class _CacheLeader(_Intercept):
    def __init__(self, lm: Any, path: str):
        super().__init__(lm)
        self._tap = _Tap(lm)
        self._cache = CachingLM(self._tap, path)

    def call(self, name: str, requests: list[Any]) -> list[Any]:
        self._tap.expect(requests)
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
