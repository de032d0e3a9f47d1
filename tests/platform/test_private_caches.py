"""Caches are private data (`jaxeval.paths`): folders 0700 and files 0600 whatever the umask; a
folder or entry another user could have written (not this user's, writable by group or others,
not a plain file or folder) is skipped with one warning; files are read with a size cap and
O_NONBLOCK; a kernel library is loaded only from an intact build of this user's own.

Two users sharing a cache home are played by chown-ing entries to another uid (65534) where the
tests run as root, else those tests are skipped."""

from __future__ import annotations

import ctypes
import logging
import os
import stat
import types
from pathlib import Path

import pytest

from jaxeval import paths
from jaxeval.api import request_cache, task_index
from jaxeval.api.instance import Instance
from jaxeval.cli import startup

OTHER_UID = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file away")


@pytest.fixture()
def home(tmp_path, monkeypatch):
    """One cache home for every cache (no folder variable overrides it); warnings shown again."""
    folder = tmp_path / "home"
    monkeypatch.setenv("JAXEVAL_CACHE", str(folder))
    for name in ("JAXEVAL_INDEX_CACHE", "JAXEVAL_CACHE_PATH", "JAXEVAL_STARTUP_CACHE",
                 "JAXEVAL_PLAN_CACHE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(paths, "_warned", set(), raising=False)
    return folder


def _umask(mask: int):
    old = os.umask(mask)
    return lambda: os.umask(old)


def _fake_compiler(tmp_path: Path) -> str:
    """A stand-in compiler: writes a few bytes where `-o` says (as `ld`, into mkstemp's file)."""
    fake = tmp_path / "cxx"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\necho lib > "$2"\n')
    fake.chmod(0o755)
    return str(fake)


def _fake_transformers(tmp_path: Path) -> types.ModuleType:
    """transformers' `import_utils` as far as the start-up cache uses it."""
    pkg = tmp_path / "fake_models"
    pkg.mkdir(exist_ok=True)
    (pkg / "configuration_x.py").write_text("__all__ = ['XConfig']\n")
    module = types.ModuleType("import_utils")
    module.define_import_structure = lambda path, prefix=None: {  # type: ignore[attr-defined]
        frozenset(): {"configuration_x": {"XConfig"}}
    }
    return module


# -- the paths functions -------------------------------------------------------------------------


def test_private_dir_is_0700_whatever_the_umask(home):
    restore = _umask(0)
    try:
        made = paths.private_dir(home / "a" / "b")
    finally:
        restore()
    assert made == home / "a" / "b"
    for folder in (home, home / "a", home / "a" / "b"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_an_open_cache_folder_of_this_users_is_made_0700(home):
    """A home an older jaxeval made 0775 (umask 002) or 0777: only its owner can change it, so it
    is tightened and used; what others may have put in it is still checked entry by entry."""
    (home / "kind").mkdir(parents=True)
    os.chmod(home, 0o777)
    os.chmod(home / "kind", 0o775)
    assert paths.private_dir(home / "kind") == home / "kind"
    assert (
        stat.S_IMODE(home.stat().st_mode) == stat.S_IMODE((home / "kind").stat().st_mode) == 0o700
    )


@root_only
def test_a_cache_home_of_another_user_is_never_used(home, caplog):
    paths.private_dir(home / "kind")
    os.chown(home, OTHER_UID, OTHER_UID)
    with caplog.at_level(logging.WARNING, logger="jaxeval.paths"):
        assert paths.private_dir(home / "kind") is None
        assert paths.private_dir(home / "kind") is None
    assert len(caplog.records) == 1 and "owned by uid 65534" in caplog.text
    os.chown(home, os.geteuid(), os.getegid())
    os.chown(home / "kind", OTHER_UID, OTHER_UID)  # a kind folder planted by another user
    assert paths.private_dir(home / "kind") is None
    assert stat.S_IMODE((home / "kind").stat().st_mode) == 0o700  # never changed


def test_read_private_refuses_a_fifo_a_link_and_an_oversize_file(home, caplog):
    folder = paths.private_dir(home / "kind")
    fifo = folder / "fifo.json"
    os.mkfifo(fifo, 0o600)
    big = folder / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(200 << 20)  # 200 MB, sparse: never read
    big.chmod(0o600)
    good = folder / "good.json"
    assert paths.write_private(good, b"[1]")
    link = folder / "link.json"
    link.symlink_to(good)
    with caplog.at_level(logging.WARNING, logger="jaxeval.paths"):
        assert paths.read_private(fifo, 1 << 20) is None  # returns at once: O_NONBLOCK
        assert paths.read_private(big, 16 << 20) is None
        assert paths.read_private(link, 1 << 20) is None
        assert paths.read_private(folder / "missing.json", 10) is None
    assert paths.read_private(good, 3) == b"[1]" and paths.read_private(good, 2) is None
    assert stat.S_IMODE(good.stat().st_mode) == 0o600
    assert "not a regular file" in caplog.text and "over the" in caplog.text


def test_group_writable_or_foreign_entries_are_not_trusted(home):
    folder = paths.private_dir(home / "kind")
    entry = folder / "e.json"
    paths.write_private(entry, b"{}")
    assert paths.trusted_file(entry)
    entry.chmod(0o620)
    assert not paths.trusted_file(entry) and paths.read_private(entry, 10) is None
    entry.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(entry, OTHER_UID, OTHER_UID)
        assert not paths.trusted_file(entry) and paths.read_private(entry, 10) is None


# -- kernels --------------------------------------------------------------------------------------


def _library(home: Path) -> Path:
    return home / "kernels" / "lib.so"


def test_a_kernel_is_loaded_only_from_an_intact_build(home, tmp_path):
    cxx = _fake_compiler(tmp_path)
    lib = _library(home)
    builds: list[Path] = []

    def build(target: Path) -> None:
        builds.append(target)
        paths.build_native(cxx, [], Path(__file__), target)

    assert paths.load_native(lib, build, Path.read_bytes) == b"lib\n" and len(builds) == 1
    assert stat.S_IMODE(lib.stat().st_mode) == 0o600
    assert paths.load_native(lib, build, Path.read_bytes) == b"lib\n" and len(builds) == 1
    lib.write_bytes(b"planted constructor")  # rewritten: no longer its build's sha256
    assert paths.load_native(lib, build, Path.read_bytes) == b"lib\n" and len(builds) == 2
    lib.write_bytes(b"li")  # truncated
    assert paths.load_native(lib, build, Path.read_bytes) == b"lib\n" and len(builds) == 3
    lib.chmod(0o660)  # group-writable
    assert paths.load_native(lib, build, Path.read_bytes) == b"lib\n" and len(builds) == 4
    if os.geteuid() == 0:
        os.chown(lib, OTHER_UID, OTHER_UID)
        assert paths.load_native(lib, build, Path.read_bytes) == b"lib\n" and len(builds) == 5
        assert lib.stat().st_uid == os.geteuid()


def test_a_library_that_fails_to_load_is_built_again(home, tmp_path):
    """A build that matches its sha256 but does not load (built corrupt) is built once more."""
    cxx = _fake_compiler(tmp_path)
    lib = _library(home)
    paths.build_native(cxx, [], Path(__file__), lib)
    tries: list[int] = []

    def load(path: Path) -> bytes:
        tries.append(1)
        if len(tries) == 1:
            raise OSError("invalid ELF header")
        return path.read_bytes()

    assert paths.load_native(lib, lambda t: paths.build_native(cxx, [], Path(__file__), t), load)
    assert len(tries) == 2


@pytest.mark.skipif(paths.cxx_compiler() is None, reason="no C++ compiler")
def test_a_corrupt_bootstrap_kernel_is_rebuilt_not_loaded(home, monkeypatch):
    """The repro: garbage under the kernel's name (a planted or half-written `.so`) was loaded, or
    failed to load in every later run; now it is built again and loads."""
    from jaxeval.metrics import bootstrap_kernel

    monkeypatch.setattr(bootstrap_kernel, "_state", {})
    target = bootstrap_kernel.kernel_path(bootstrap_kernel.cxx_compiler())
    paths.private_dir(target.parent)
    target.write_bytes(b"\x7fELF garbage")
    target.chmod(0o600)
    lib = bootstrap_kernel.load_kernel()
    assert lib is not None, bootstrap_kernel.kernel_error()
    assert isinstance(lib, ctypes.CDLL) and target.read_bytes()[:4] == b"\x7fELF"
    assert paths.digest_path(target).exists()


# -- every cache under umask 000 ------------------------------------------------------------------


def test_no_cache_path_is_group_or_other_writable_under_umask_000(home, tmp_path, monkeypatch):
    from jaxeval.cache import ResponseStore
    from jaxeval.plan.figures import FigureCache

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "t.yaml").write_text("task: t\noutput_type: loglikelihood\n")
    doc = {"q": "2+2?"}
    requests = [[Instance("loglikelihood", doc, ("Q: 2+2?", " 4"), 0, ("t", 0, 1))]]
    import_utils = _fake_transformers(tmp_path)
    monkeypatch.setattr(startup, "_structure_key", lambda module_path, prefix: "k" * 64)
    restore = _umask(0)
    try:
        task_index.index_folder(tasks, "include")
        request_cache.save("requests-t.json", requests)
        paths.build_native(_fake_compiler(tmp_path), [], Path(__file__), _library(home))
        startup._cache_structures(import_utils, startup.structure_cache_dir())
        import_utils.define_import_structure(tmp_path / "fake_models")
        figures = FigureCache.open()
        figures.put("k", {"flops": 1})
        assert figures.get("k") == {"flops": 1}
        store = ResponseStore(str(tmp_path / "responses" / "run_rank0.db"))
        store.put([("k", "m", "answer")])
        store.close()
    finally:
        restore()
    made = [home, *home.rglob("*"), tmp_path / "responses", *(tmp_path / "responses").rglob("*")]
    kinds = {p.relative_to(home).parts[0] for p in home.rglob("*")}
    assert {"task_index", "requests", "kernels", "startup", "plan"} <= kinds
    assert len(made) >= 10
    writable = {str(p): oct(stat.S_IMODE(p.lstat().st_mode)) for p in made}
    assert {p: m for p, m in writable.items() if int(m, 8) & 0o022} == {}
    private = [p for p in home.rglob("*")]
    assert all(stat.S_IMODE(p.stat().st_mode) in (0o600, 0o700) for p in private)


@pytest.mark.skipif(paths.cxx_compiler() is None, reason="no C++ compiler")
def test_a_corrupt_cpu_attention_kernel_is_rebuilt(home):
    """The repro: garbage under the CPU attention kernel's name was never rebuilt (every run fell
    back to XLA's loop); a process of its own, since the kernel registers once per process."""
    import subprocess
    import sys

    code = (
        "from jaxeval import paths\n"
        "from jaxeval.ops.attention import cpu\n"
        "target = cpu.library_path(cpu.compiler())\n"
        "paths.private_dir(target.parent)\n"
        "target.write_bytes(b'not a library')\n"
        "target.chmod(0o600)\n"
        "print(cpu.available(), cpu.build_error())\n"
    )
    env = {**os.environ, "JAXEVAL_CACHE": str(home)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.stdout.split() == ["True", "None"], out.stderr[-2000:]
