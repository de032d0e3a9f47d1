"""The `jaxeval` command keeps transformers' scan of its `models` folder between processes
(jaxeval.cli.startup): a process that reads it back builds the same lazy modules, config and
tokenizer as one that scans; an edited source file or a damaged entry scans again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxeval.cli import startup
from tests.helpers.tiny_models import tiny_checkpoint

# What transformers built from the import structures (its top module's and `transformers.models`'),
# and a checkpoint's config and token ids, as the command would load them.
PROBE = """
import json, sys
from jaxeval.cli.startup import hide_torch_from_transformers
hide_torch_from_transformers()
import transformers, transformers.models
from transformers import AutoConfig, AutoTokenizer
path = sys.argv[1]
def lazy(m):
    return {
        "class_to_module": sorted(m._class_to_module.items()),
        "modules": sorted(m._modules),
        "missing": sorted((k, sorted(v)) for k, v in m._object_missing_backend.items()),
    }
tok = AutoTokenizer.from_pretrained(path)
print(json.dumps({
    "top": lazy(transformers),
    "models": lazy(transformers.models),
    "config": AutoConfig.from_pretrained(path).to_dict(),
    "ids": tok(["Question: what is 2 + 2?\\nAnswer: 4", " fox"])["input_ids"],
}))
"""


def _probe(path: str, cache: str) -> dict:
    env = {**os.environ, startup.STARTUP_CACHE: cache, "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, path], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _entries(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")}


def test_kept_structures_build_what_a_scan_builds(tmp_path):
    path = tiny_checkpoint("llama")
    cache = tmp_path / "startup"
    scanned = _probe(path, "off")
    assert not cache.exists()
    filled = _probe(path, str(cache))
    kept = _entries(cache)
    assert len(kept) >= 2  # transformers' top module and `transformers.models`, at least
    read = _probe(path, str(cache))
    assert _entries(cache) == kept  # read back, nothing scanned and written again
    assert scanned == filled == read
    assert len(scanned["models"]["class_to_module"]) > 500  # the real catalogue, not an empty map

    damaged = sorted(kept)[0]
    for text in ("{not json", '{"ab": "cd"}', "[[1, 2]]"):  # not JSON; JSON of other shapes
        (cache / damaged).write_text(text, encoding="utf-8")
        assert _probe(path, str(cache)) == scanned
        json.loads((cache / damaged).read_text(encoding="utf-8"))  # scanned and kept again
        assert (cache / damaged).read_text(encoding="utf-8") != text


def _key(module_path, prefix):
    """The key a new process would compute (the folder walk is kept per process)."""
    startup._source_files.cache_clear()
    return startup._structure_key(module_path, prefix)


def test_key_follows_the_source_files(tmp_path):
    pkg = tmp_path / "models"
    (pkg / "llama").mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    source = pkg / "llama" / "configuration_llama.py"
    source.write_text("__all__ = ['LlamaConfig']\n", encoding="utf-8")
    (pkg / "llama" / "__pycache__").mkdir()
    key = _key(pkg, "models")
    assert _key(pkg / "__init__.py", None) != key  # another call, another key
    (pkg / "llama" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (pkg / "llama" / "README.md").write_text("not a source", encoding="utf-8")
    assert _key(pkg, "models") == key  # only .py sources count
    source.write_text("__all__ = ['LlamaConfig', 'Other']\n", encoding="utf-8")
    assert _key(pkg, "models") != key  # edited
    key = _key(pkg, "models")
    (pkg / "llama" / "modeling_llama.py").write_text("", encoding="utf-8")
    assert _key(pkg, "models") != key  # added
    startup._source_files.cache_clear()  # within one process, the folder is walked once
    startup._structure_key(pkg, "models")
    startup._structure_key(pkg / "__init__.py", None)
    assert startup._source_files.cache_info().misses == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError):
        _key(tmp_path / "empty", None)  # nothing to key by: scanned, not kept


def test_json_round_trip_keeps_the_structure():
    structure = {
        frozenset(): {"models.llama.configuration_llama": {"LlamaConfig"}},
        frozenset({"torch", "vision"}): {"models.x.image_processing_x": {"A", "B"}},
    }
    assert startup._from_json(json.loads(json.dumps(startup._to_json(structure)))) == structure


def test_off_switch(monkeypatch, tmp_path):
    monkeypatch.setenv(startup.STARTUP_CACHE, "off")
    assert startup.structure_cache_dir() is None
    monkeypatch.setenv(startup.STARTUP_CACHE, str(tmp_path))
    assert startup.structure_cache_dir() == tmp_path
    monkeypatch.delenv(startup.STARTUP_CACHE)
    monkeypatch.setenv("JAXEVAL_CACHE", str(tmp_path / "home"))
    assert startup.structure_cache_dir() == tmp_path / "home" / "startup"


# -- entries that are not what this module wrote ----------------------------------------------------

SCANNED = {
    frozenset(): {"models.x.configuration_x": {"XConfig"}},
    frozenset({"torch"}): {"models.x.modeling_x": {"XModel"}},
}


@pytest.fixture()
def kept(tmp_path, monkeypatch):
    """`define_import_structure` wrapped by the start-up cache over a stand-in scan, and the
    path of the entry it keeps."""
    import types

    from jaxeval import paths

    monkeypatch.setattr(paths, "_warned", set(), raising=False)
    monkeypatch.setattr(startup, "_structure_key", lambda module_path, prefix: "k" * 64)
    scans: list[int] = []
    module = types.ModuleType("import_utils")
    module.define_import_structure = lambda path, prefix=None: scans.append(1) or SCANNED
    cache = tmp_path / "startup"
    startup._cache_structures(module, cache)
    module.scans = scans
    return module, cache / f"{'k' * 64}.json"


def test_an_entry_of_the_wrong_shape_is_scanned_again(kept):
    """The repro: valid JSON of another shape reached transformers (`[]`: ImportError AutoConfig;
    a structure without its `frozenset()` key: KeyError)."""
    module, entry = kept
    define = module.define_import_structure
    assert define("m") == SCANNED and len(module.scans) == 1
    define.cache_clear()
    assert define("m") == SCANNED and len(module.scans) == 1  # read back
    for text in ("[]", '[[["torch"], {}]]', json.dumps(startup._to_json(SCANNED)),
                 entry.read_text().replace("XConfig", "YConfig")):  # fmt: skip
        entry.write_text(text)
        define.cache_clear()
        assert define("m") == SCANNED, text
    assert len(module.scans) == 5


def test_a_huge_entry_is_refused_unread(kept):
    import tracemalloc

    module, entry = kept
    module.define_import_structure("m")
    with open(entry, "r+b") as fh:
        fh.truncate(200 << 20)  # 200 MB (sparse)
    module.define_import_structure.cache_clear()
    tracemalloc.start()
    try:
        assert module.define_import_structure("m") == SCANNED
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20


def test_a_fifo_entry_never_hangs(kept):
    import threading

    module, entry = kept
    entry.parent.mkdir(mode=0o700)
    os.mkfifo(entry, 0o600)
    got: list = []
    reader = threading.Thread(target=lambda: got.append(module.define_import_structure("m")))
    reader.daemon = True
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # release the blocked reader before failing
        os.close(os.open(entry, os.O_WRONLY | os.O_NONBLOCK))
    assert got == [SCANNED]
