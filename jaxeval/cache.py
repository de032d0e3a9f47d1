"""`--use_cache PREFIX`: a response cache that survives SIGKILL, keyed by the model and the request.

    key   = sha256(json.dumps([fingerprint, "loglikelihood", "ctx", " cont"]))
    value = json.dumps([ll, is_greedy])            (a float for rolling, a string for generation)

One sqlite file in WAL mode (`PREFIX_rank0.db`). Rows are committed batch by batch as the kernel
returns them: a model that defines `answer_hook` (JaxLM) calls it with (positions, answers) after
each kernel batch, and each call is one transaction. A run killed at any point keeps every finished
batch; its rerun serves those from the file and recomputes at most the batch that was in flight.
Models without the hook are stored when their call returns.

The fingerprint names what produced an answer: the model's `fingerprint()` (JaxLM: weights' and
tokenizer files' identity, dtype, max_length, tokenizer), else its class. Rows of another
fingerprint are never served; a file holding them gets a warning. Sampled generations are never
stored. Values are JSON (not pickles), so a cache file is safe to share. Multi-host: only process
0 opens the file (`jaxeval.distributed.response_cache`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
from typing import Any

from jaxeval.api.instance import Instance
from jaxeval.errors import JaxevalError

log = logging.getLogger(__name__)
METHODS = ("loglikelihood", "loglikelihood_rolling", "generate_until")


def file_identity(path: str) -> list:
    """[name, size, mtime_ns] of a file, or of every file directly inside a directory; [] if absent.
    Rewriting weights under the same path changes size or mtime, so the fingerprint changes."""
    if not path or not os.path.exists(path):
        return []
    if os.path.isfile(path):
        st = os.stat(path)
        return [os.path.abspath(path), st.st_size, st.st_mtime_ns]
    out = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if os.path.isfile(full):
            st = os.stat(full)
            out.append([name, st.st_size, st.st_mtime_ns])
    return [os.path.abspath(path), out]


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

    def get(self, key: str) -> Any:
        row = self._db.execute("SELECT value FROM answers WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

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
                "%s holds %d answers from other weights, tokenizer or settings; they are ignored "
                "and this run's answers are stored beside them",
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

    `computed` counts the requests sent to the model, per method (a rerun after a kill sends only
    what the file lacks)."""

    def __init__(self, lm: Any, store: ResponseStore | str):
        self.lm = lm
        self.store = store if isinstance(store, ResponseStore) else ResponseStore(store)
        self.path = self.store.path
        self.fingerprint = model_fingerprint(innermost(lm))
        self.store.warn_if_other_models(self.fingerprint)
        self.computed = dict.fromkeys(METHODS, 0)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.lm, name)
        if name not in METHODS:
            return attr

        def call(requests: list[Instance]) -> list[Any]:
            out: list[Any] = [None] * len(requests)
            todo: list[int] = []
            for i, req in enumerate(requests):
                hit = None
                if _cacheable(name, req):
                    hit = self.store.get(hash_args(self.fingerprint, name, req.args))
                if hit is None:
                    todo.append(i)
                else:
                    out[i] = tuple(hit) if name == "loglikelihood" else hit
            if not todo:
                return out
            stored: set[int] = set()

            def store(positions: list[int], answers: list[Any]) -> None:
                rows = []
                for p, value in zip(positions, answers):
                    req = requests[todo[p]]
                    if p not in stored and _cacheable(name, req):
                        rows.append(
                            (hash_args(self.fingerprint, name, req.args), self.fingerprint, value)
                        )
                    stored.add(p)
                self.store.put(rows)

            target = hook_target(self.lm)
            if target is not None:
                target.answer_hook = store
            try:
                fresh = attr([requests[i] for i in todo])
            finally:
                if target is not None:
                    target.answer_hook = None
            self.computed[name] += len(todo)
            rest = [p for p in range(len(todo)) if p not in stored]
            store(rest, [fresh[p] for p in rest])
            for p, value in enumerate(fresh):
                out[todo[p]] = value
            return out

        return call
