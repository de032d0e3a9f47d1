"""The response cache fails soft (`jaxeval.cache.ResponseStore`): a damaged page, an `answers`
table of another schema or a disk that fills mid-run is one warning, and the run goes on with
every answer computed and the same results; closing checkpoints the write-ahead log, so a copy of
the `.db` alone holds the answers."""

from __future__ import annotations

import gc
import logging
import shutil
import sqlite3

import pytest

from jaxeval.api.instance import Instance
from jaxeval.cache import CachingLM, ResponseStore


class _Model:
    """Answers each loglikelihood request with a value of its own; counts what it computed."""

    def __init__(self):
        self.computed = 0

    def loglikelihood(self, requests):
        self.computed += len(requests)
        return [(-float(len(r.args[0]) + len(r.args[1])), False) for r in requests]


def _requests(n: int = 40) -> list[Instance]:
    return [Instance("loglikelihood", {}, (f"context {i}", f" word{i}"), 0) for i in range(n)]


def _filled(path) -> list:
    """The answers, stored in `path` by a store that is then let go (closed as it is collected)."""
    want = CachingLM(_Model(), ResponseStore(str(path))).loglikelihood(_requests())
    gc.collect()
    return want


class _FullDisk:
    """A connection whose writes fail as a full disk does (reads still work)."""

    def __init__(self, db):
        self._db = db

    def __getattr__(self, name):
        return getattr(self._db, name)

    def __enter__(self):
        return self._db.__enter__()

    def __exit__(self, *exc):
        return self._db.__exit__(*exc)

    def executemany(self, *args):
        raise sqlite3.OperationalError("database or disk is full")


def test_a_disk_that_fills_mid_run_is_one_warning(tmp_path, caplog):
    """The repro: the first write after the disk filled killed a run although only the cache
    failed."""
    want = CachingLM(_Model(), ResponseStore(str(tmp_path / "ref.db"))).loglikelihood(_requests())
    store = ResponseStore(str(tmp_path / "c.db"))
    store._db = _FullDisk(store._db)
    model = _Model()
    cached = CachingLM(model, store)
    with caplog.at_level(logging.WARNING, logger="jaxeval.cache"):
        assert cached.loglikelihood(_requests()) == want
        assert cached.loglikelihood(_requests()) == want  # the cache is off: computed again
    assert model.computed == 2 * len(want)
    assert len(caplog.records) == 1 and "database or disk is full" in caplog.text


def test_a_malformed_page_is_one_warning(tmp_path, caplog):
    path = tmp_path / "c.db"
    want = _filled(path)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) >= 4 * page
    data[2 * page : len(data)] = b"\xa5" * (len(data) - 2 * page)  # every page after the second
    path.write_bytes(bytes(data))
    model = _Model()
    with caplog.at_level(logging.WARNING, logger="jaxeval.cache"):
        assert CachingLM(model, ResponseStore(str(path))).loglikelihood(_requests()) == want
    assert model.computed == len(want)
    assert len(caplog.records) == 1 and "malformed" in caplog.text


@pytest.mark.parametrize("schema", ["CREATE TABLE answers (a, b)", "CREATE TABLE answers (key)"])
def test_an_answers_table_of_another_schema_is_one_warning(tmp_path, caplog, schema):
    path = tmp_path / "c.db"
    db = sqlite3.connect(path)
    db.execute(schema)
    db.commit()
    db.close()
    model = _Model()
    with caplog.at_level(logging.WARNING, logger="jaxeval.cache"):
        got = CachingLM(model, ResponseStore(str(path))).loglikelihood(_requests())
    assert got == _Model().loglikelihood(_requests()) and model.computed == len(got)
    assert len(caplog.records) == 1 and "columns" in caplog.text


def test_a_copy_of_the_db_alone_holds_the_answers(tmp_path):
    """The repro: the command exited without a checkpoint, its answers stayed in the -wal file,
    and a copy of the .db alone was empty."""
    path = tmp_path / "c.db"
    store = ResponseStore(str(path))
    want = CachingLM(_Model(), store).loglikelihood(_requests())
    store.close()
    assert not (tmp_path / "c.db-wal").exists() or (tmp_path / "c.db-wal").stat().st_size == 0
    shutil.copy(path, tmp_path / "copy.db")
    model = _Model()
    store = ResponseStore(str(tmp_path / "copy.db"))
    assert store.count() == len(want)
    assert CachingLM(model, store).loglikelihood(_requests()) == want and model.computed == 0


def test_the_store_checkpoints_at_exit(tmp_path):
    """A process that never calls `close` (the command ends with `os._exit` after the exit
    handlers) still leaves every answer in the .db."""
    import subprocess
    import sys

    code = (
        "import atexit, os, sys\n"
        "from jaxeval.cache import ResponseStore\n"
        "s = ResponseStore(sys.argv[1])\n"
        "s.put([(f'k{i}', 'm', [-1.0, False]) for i in range(50)])\n"
        "atexit._run_exitfuncs()\n"
        "os._exit(0)\n"
    )
    path = tmp_path / "c.db"
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=120)
    shutil.copy(path, tmp_path / "copy.db")
    db = sqlite3.connect(tmp_path / "copy.db")
    assert db.execute("SELECT COUNT(*) FROM answers").fetchone()[0] == 50
