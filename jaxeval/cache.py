"""`--use_cache PREFIX`: an sqlite response cache keyed like lm-eval's (sha256 of the method + args).

    key = sha256(json.dumps(["loglikelihood", "ctx", " cont"]))  ->  value = [ll, is_greedy]

Hits are served, misses run in one model call and are stored; sampled generations are never cached.
Values are JSON (not pickles), so a cache file is safe to share.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from typing import Any

from jaxeval.api.instance import Instance
from jaxeval.lm.base import LM

METHODS = ("loglikelihood", "loglikelihood_rolling", "generate_until")


def hash_args(method: str, args: tuple) -> str:
    return hashlib.sha256(json.dumps([method, *args]).encode("utf-8")).hexdigest()


class CachingLM:
    """Wraps an LM; the three request methods consult the cache first."""

    def __init__(self, lm: LM, path: str):
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        self.lm, self.path = lm, path
        self._db = sqlite3.connect(path)
        self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT)")
        self._db.commit()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.lm, name)
        if name not in METHODS:
            return attr

        def call(requests: list[Instance]) -> list[Any]:
            out: list[Any] = [None] * len(requests)
            todo: list[int] = []
            for i, req in enumerate(requests):
                sampled = name == "generate_until" and req.args[1].get("do_sample", False)
                row = None if sampled else self._db.execute(
                    "SELECT value FROM responses WHERE key = ?", (hash_args(name, req.args),)).fetchone()
                if row is None:
                    todo.append(i)
                else:
                    value = json.loads(row[0])
                    out[i] = tuple(value) if name == "loglikelihood" else value
            fresh = attr([requests[i] for i in todo]) if todo else []
            for i, value in zip(todo, fresh):
                out[i] = value
                req = requests[i]
                if not (name == "generate_until" and req.args[1].get("do_sample", False)):
                    self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?)",
                                     (hash_args(name, req.args), json.dumps(value)))
            self._db.commit()
            return out

        return call
