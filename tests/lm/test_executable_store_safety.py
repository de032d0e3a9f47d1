"""The executable store as data, never code: a planted or damaged entry, an entry of another user
or one others may write, a store that cannot be written, each costs a compile and nothing else.
The answers are those of a run without the store, bit for bit."""

from __future__ import annotations

import functools
import hashlib
import hmac
import io
import json
import logging
import os
import pickle
import stat
import threading
import time

import jax
import numpy as np
import pytest
from jax.experimental import serialize_executable

from jaxeval.lm import executable_entry as entry
from jaxeval.lm import executable_store as es
from jaxeval.lm.executable_store import ExecutableStore
from jaxeval.lm.executables import Executables, Job
from jaxeval.models.layers import norm
from jaxeval.platform import compile_cache

OTHER_UID = 54321


def _job(n: int = 4) -> Job:
    p = {"scale": jax.ShapeDtypeStruct((8,), np.float32)}
    x = jax.ShapeDtypeStruct((n, 8), np.float32)
    return Job(("norm", n), functools.partial(norm, kind="rms", eps=1e-6), (p, x))


def _args(n: int = 4):
    rng = np.random.default_rng(0)
    return {"scale": rng.standard_normal(8).astype(np.float32)}, rng.standard_normal(
        (n, 8), np.float32
    )


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXEVAL_CACHE", str(tmp_path / "home"))  # the key's folder
    monkeypatch.setattr(entry, "_warned", set())
    path = compile_cache.enable(str(tmp_path / "xla"))
    try:
        yield path
    finally:
        compile_cache.enable("off")


def _first_run(n: int = 4):
    """(the store, the job's entry, the answers of a run that compiled it)."""
    exe = Executables(store=True)
    out = np.asarray(exe.get(_job(n))(*_args(n)))
    assert exe.compilations == 1
    store = ExecutableStore.for_compile_cache()
    path = store.root / f"{store.fingerprint(_job(n), None)}.exe"
    assert path.is_file()
    jax.clear_caches()  # as a new process would start: only the files
    return store, path, out


def _next_run(n: int = 4):
    """(Executables, answers) of the next run on the same cache."""
    exe = Executables(store=True)
    return exe, np.asarray(exe.get(_job(n))(*_args(n)))


class _Planted:
    """Unpickled, it creates `marker`: code a store must never run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def _signed_entry(path, payload: bytes) -> bytes:
    meta = entry.EntryMeta(
        fingerprint=path.stem, platform="cpu", devices=(0,), targets=(), out_tree="*"
    )
    return entry.pack(meta, payload, entry.user_key())


def test_a_planted_pickle_never_runs(cache, tmp_path, caplog):
    store, path, out = _first_run()
    marker = tmp_path / "ran"
    path.write_bytes(pickle.dumps({"format": 1, "fingerprint": path.stem, "x": _Planted(marker)}))
    with caplog.at_level(logging.WARNING):
        exe, again = _next_run()
    assert not marker.exists()
    assert exe.store_loads == 0 and exe.cache_hits == 1  # JAX's cache, lowered as before
    np.testing.assert_array_equal(again, out)
    assert "failed its check" in caplog.text
    jax.clear_caches()
    exe, third = _next_run()  # stored again, as an entry: loaded
    assert exe.store_loads == 1
    np.testing.assert_array_equal(third, out)


def test_a_signed_entry_names_nothing_outside_jax(cache, tmp_path, caplog):
    """Even under this user's own key, the payload's unpickler loads JAX's classes only."""
    store, path, out = _first_run()
    marker = tmp_path / "ran"
    path.write_bytes(_signed_entry(path, pickle.dumps(_Planted(marker))))
    with caplog.at_level(logging.WARNING):
        exe, again = _next_run()
    assert not marker.exists() and exe.store_loads == 0
    np.testing.assert_array_equal(again, out)
    assert "failed to load" in caplog.text


@pytest.mark.parametrize("where", ["payload", "metadata", "tag", "key"])
def test_a_tampered_entry_is_not_deserialized(cache, monkeypatch, where, caplog):
    store, path, out = _first_run()
    data = bytearray(path.read_bytes())
    offset = {"payload": len(data) // 2, "metadata": 40, "tag": len(data) - 1}.get(where)
    if offset is None:  # a well-formed entry under another user's key
        meta, payload = entry.unpack(bytes(data), entry.user_key())
        data = bytearray(entry.pack(meta, payload, b"k" * entry.KEY_BYTES))
    else:
        data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    loads = []
    monkeypatch.setattr(
        serialize_executable, "deserialize_and_load", lambda *a, **k: loads.append(a)
    )
    with caplog.at_level(logging.WARNING):
        exe, again = _next_run()
    assert loads == [] and exe.store_loads == 0
    np.testing.assert_array_equal(again, out)
    assert "failed its check" in caplog.text


def test_a_rewritten_fingerprint_is_not_loaded(cache):
    """Another job's entry copied under this job's name, its fingerprint rewritten."""
    store, other, _ = _first_run(n=4)
    _, _, out = _first_run(n=5)
    path = store.root / f"{store.fingerprint(_job(5), None)}.exe"
    data = other.read_bytes()
    if data.startswith(entry.MAGIC):  # its metadata rewritten, its HMAC kept
        start = len(entry.MAGIC) + 8
        length = int.from_bytes(data[len(entry.MAGIC) : start], "big")
        head = data[start : start + length].replace(other.stem.encode(), path.stem.encode())
        data = data[:start] + head + data[start + length :]
    else:  # an entry of the store's first format
        old = pickle.loads(data)
        data = pickle.dumps(old | {"fingerprint": path.stem})
    path.write_bytes(data)
    exe, again = _next_run(n=5)
    assert exe.store_loads == 0
    np.testing.assert_array_equal(again, out)


def _fstat_as_owner(monkeypatch, path, uid):
    """`os.fstat` of `path` as if `uid` owned it (where this process may not `chown`)."""
    real = os.fstat

    def fstat(fd):
        st = real(fd)
        if os.readlink(f"/proc/self/fd/{fd}") != str(path):
            return st
        fields = list(st[:10])
        fields[stat.ST_UID] = uid
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", fstat)


def test_an_entry_of_another_user_is_skipped(cache, monkeypatch, caplog):
    store, path, out = _first_run()
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, OTHER_UID)
    else:
        _fstat_as_owner(monkeypatch, path, OTHER_UID)
    with caplog.at_level(logging.WARNING):
        exe, again = _next_run()
    assert exe.store_loads == 0
    np.testing.assert_array_equal(again, out)
    assert f"owned by uid {OTHER_UID}" in caplog.text


def test_an_entry_others_may_write_is_skipped(cache, caplog):
    store, path, out = _first_run()
    os.chmod(path, 0o664)
    with caplog.at_level(logging.WARNING):
        exe, again = _next_run()
    assert exe.store_loads == 0
    np.testing.assert_array_equal(again, out)
    assert "writable by group or others" in caplog.text


def test_under_umask_000_the_store_is_private(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXEVAL_CACHE", str(tmp_path / "home"))
    compile_cache.enable(str(tmp_path / "xla"))
    old = os.umask(0)
    try:
        _first_run()
    finally:
        os.umask(old)
        compile_cache.enable("off")
    root = tmp_path / "xla" / es.SUBDIR
    keys = tmp_path / "home" / "keys"
    for folder in (root, keys):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    files = [*root.iterdir(), *keys.iterdir()]
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files), files


def test_a_read_only_store(cache, monkeypatch):
    root = ExecutableStore.for_compile_cache().root
    root.mkdir(mode=0o700)
    real, read_only = os.open, [True]  # (root may write anywhere: the file system refuses here)

    def refused(path, flags, *args, **kwargs):
        if read_only[0] and flags & os.O_CREAT and str(path).startswith(str(root)):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)
    exe = Executables(store=True)
    out = np.asarray(exe.get(_job())(*_args()))
    assert exe.compilations == 1 and not list(root.iterdir())
    read_only[0] = False
    jax.clear_caches()
    exe, again = _next_run()  # the store writable again: stored now, same answers
    assert exe.store_loads == 0 and len(list(root.iterdir())) == 1
    np.testing.assert_array_equal(again, out)


def test_a_store_path_that_is_a_file(cache):
    root = ExecutableStore.for_compile_cache().root
    root.write_bytes(b"not a folder")
    exe, out = _next_run()
    assert exe.compilations == 1 and root.read_bytes() == b"not a folder"
    jax.clear_caches()
    exe, again = _next_run()
    assert exe.store_loads == 0
    np.testing.assert_array_equal(again, out)


def test_an_entry_that_is_a_folder(cache):
    store, path, out = _first_run()
    path.unlink()
    path.mkdir()
    exe, again = _next_run()
    assert exe.store_loads == 0 and path.is_dir()
    np.testing.assert_array_equal(again, out)


def test_a_fifo_entry_never_blocks(cache):
    store, path, out = _first_run()
    path.unlink()
    os.mkfifo(path)

    def unblock():  # a reader blocked on the FIFO gets an end of file (a store that opened it)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader: nobody blocked

    timer = threading.Timer(20.0, unblock)
    timer.start()
    try:
        start = time.monotonic()
        exe, again = _next_run()
        elapsed = time.monotonic() - start
    finally:
        timer.cancel()
    assert elapsed < 15.0 and exe.store_loads == 0
    np.testing.assert_array_equal(again, out)


def test_the_drawn_entry():
    """The module docstring's entry, byte for byte."""
    meta = entry.EntryMeta(
        fingerprint="9f3c", platform="cpu", devices=(0,), targets=(), out_tree={"tuple": ["*", "*"]}
    )
    data = entry.pack(meta, b"PAYLOAD", b"k" * entry.KEY_BYTES)
    head = b'{"devices":[0],"fingerprint":"9f3c","format":2,"out_tree":{"tuple":["*","*"]},'
    head += b'"platform":"cpu","targets":[]}'
    assert len(head) == 108 and len(data) == 167
    assert data[:20] == b"jaxeval-exe\x00" + bytes([0] * 7 + [0x6C])
    assert data[20:128] == head and data[128:135] == b"PAYLOAD"
    assert data[135:] == hmac.new(b"k" * entry.KEY_BYTES, data[:135], hashlib.sha256).digest()


def test_metadata_of_another_shape_is_refused():
    meta = entry.EntryMeta(fingerprint="f", platform="cpu", devices=(0,), targets=(), out_tree="*")
    key = b"k" * entry.KEY_BYTES
    assert entry.unpack(entry.pack(meta, b"payload", key), key) == (meta, b"payload")
    good = json.loads(meta.to_json())
    for bad in (
        [good],
        good | {"format": 1},
        good | {"devices": []},
        good | {"devices": ["0"]},
        good | {"targets": "x"},
        good | {"extra": 1},
        {k: v for k, v in good.items() if k != "platform"},
    ):
        with pytest.raises(ValueError):
            entry.EntryMeta.from_json(bad)


def test_trees_round_trip_through_json():
    from jaxeval.kernels.score import ScoreResult

    drawn = jax.tree.structure((ScoreResult(1, 2), [3, None], {"k": 4}))  # the docstring's
    assert entry.tree_json(drawn) == {
        "tuple": [
            {
                "namedtuple": "jaxeval.kernels.score:ScoreResult",
                "fields": ["loglik", "is_greedy"],
                "items": ["*", "*"],
            },
            {"list": ["*", None]},
            {"dict": [["k", "*"]]},
        ]
    }
    tree = jax.tree.structure((ScoreResult(1, 2), [3, None], {"k": 4, "a": (5,)}))
    described = entry.tree_json(tree)
    assert entry.tree_of_json(json.loads(json.dumps(described))) == tree
    assert described["tuple"][0]["namedtuple"] == "jaxeval.kernels.score:ScoreResult"
    for bad in (
        {"namedtuple": "os:system", "fields": [], "items": []},
        {"namedtuple": "jaxeval.kernels.score:ScoreResult", "fields": ["x"], "items": ["*"]},
        {"namedtuple": "collections:OrderedDict", "fields": [], "items": []},
        {"dict": [[1, "*"]]},
        {"set": []},
        "leaf",
    ):
        with pytest.raises(ValueError):
            entry.tree_of_json(bad)


def test_a_key_others_may_read_is_not_used(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(entry, "_warned", set())
    folder = tmp_path / "keys"
    key = entry.user_key(folder)
    assert key is not None and len(key) == entry.KEY_BYTES
    assert entry.user_key(folder) == key  # made once
    path = folder / entry.KEY_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chmod(path, 0o640)
    with caplog.at_level(logging.WARNING):
        assert entry.user_key(folder) is None
    assert "readable by group or others" in caplog.text
    path.unlink()
    path.mkdir()
    assert entry.user_key(folder) is None  # not a regular file


class _CallsAnInstance:
    """Unpickled, it calls an instance it built (a `Partial` of an allowed class)."""

    def __reduce__(self):
        return (jax.tree_util.Partial(jax.sharding.PartitionSpec), ("x",))


def test_the_unpickler_calls_only_what_it_named():
    client = jax.devices()[0].client
    data = pickle.dumps(_CallsAnInstance())
    assert pickle.loads(data) == jax.sharding.PartitionSpec("x")  # a plain unpickler calls it
    with pytest.raises(pickle.UnpicklingError, match="no global named"):
        entry.PayloadUnpickler(io.BytesIO(data), client).load()
    for name in ("exec", "eval", "getattr", "__import__"):
        with pytest.raises(pickle.UnpicklingError, match="not part of an executable"):
            entry.loadable("builtins", name)
    for module, name in (("os", "system"), ("numpy", "load"), ("jax.numpy", "load")):
        with pytest.raises(pickle.UnpicklingError):
            entry.loadable(module, name)
    assert entry.loadable("jax._src.mesh", "Mesh") is jax.sharding.Mesh
