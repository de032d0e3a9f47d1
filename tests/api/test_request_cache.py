"""`--cache_requests` keeps requests as JSON data (`jaxeval.api.request_cache`): what is read back
equals what was built, type for type; a pickle is never loaded; a file another user could have
written, or a damaged one, is built again."""

from __future__ import annotations

import json
import math
import os
import pickle
import stat

import pytest

from jaxeval import paths
from jaxeval.api import request_cache
from jaxeval.api.instance import Instance

OTHER_UID = 65534


@pytest.fixture()
def folder(tmp_path, monkeypatch):
    where = tmp_path / "requests"
    monkeypatch.setenv("JAXEVAL_CACHE_PATH", str(where))
    monkeypatch.setattr(paths, "_warned", set(), raising=False)
    return where


def _requests() -> list[list[Instance]]:
    doc = {"question": "2+2?", "choices": ["3", "4"], 3: (1, 2.5), "n": None, "ok": True}
    other = {"text": "é\u2028\x00", "x": -0.0, "big": 2**70, "nan": math.nan, "nested": [{"a": ()}]}
    gen = {"until": ["\n\n", "Q:"], "max_gen_toks": 32, "temperature": 0.0, "do_sample": False}
    return [
        [
            Instance("loglikelihood", doc, ("Q: 2+2?", f" {c}"), i, ("t", 0, 1))
            for i, c in enumerate("34")
        ],
        [Instance("generate_until", other, ("Say:", gen), 0, ("g", 1, None))],
        [Instance("loglikelihood_rolling", other, ("a text",), 0, ("r", 2, 1))],
    ]


def _same(a, b) -> bool:
    """Equal, of the same types all the way down (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        same = a == b or (math.isnan(a) and math.isnan(b))
        return same and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, Instance):
        fields = ("request_type", "doc", "arguments", "idx", "metadata", "task_name", "doc_id")
        return all(_same(getattr(a, f), getattr(b, f)) for f in fields + ("repeats",))
    return a == b


def test_requests_come_back_as_they_were_built(folder):
    built = _requests()
    request_cache.save("requests-t.json", built)
    back = request_cache.load("requests-t.json")
    assert _same(back, built)
    assert back[0][0].doc is back[0][1].doc  # a document shared by its requests stays shared
    assert stat.S_IMODE((folder / "requests-t.json").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert json.loads((folder / "requests-t.json").read_text())["format"] == request_cache.FORMAT


def test_a_planted_pickle_never_runs(folder, tmp_path):
    """The repro: a pickle under the cache's name ran its code when the requests were read."""
    witness = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {witness}",))

    folder.mkdir(mode=0o700)
    for name in ("requests-t.pickle", "requests-t.json"):
        (folder / name).write_bytes(pickle.dumps(Payload()))
        (folder / name).chmod(0o600)
        assert request_cache.load(name) is None
    assert not witness.exists()
    request_cache.delete_all()
    assert list(folder.iterdir()) == []


def test_a_damaged_file_is_built_again(folder, caplog):
    request_cache.save("requests-t.json", _requests())
    path = folder / "requests-t.json"
    good = path.read_text()
    for text in ("{not json", "[]", '{"format": "jaxeval-requests-1", "docs": [], "groups": [[1]]}',
                 good.replace('"loglikelihood"', '"nonsense"', 1), good[: len(good) // 2]):  # fmt: skip
        path.write_text(text)
        assert request_cache.load("requests-t.json") is None, text
    assert "damaged" in caplog.text


def test_a_document_json_cannot_give_back_is_not_cached(folder):
    import numpy as np

    request_cache.save(
        "requests-n.json", [[Instance("loglikelihood", {"x": np.float64(1)}, ("a", "b"), 0)]]
    )
    request_cache.save(
        "requests-b.json", [[Instance("loglikelihood", {"x": b"raw"}, ("a", "b"), 0)]]
    )
    assert (
        request_cache.load("requests-n.json") is None
        and request_cache.load("requests-b.json") is None
    )


def test_a_file_another_user_could_write_is_not_read(folder):
    request_cache.save("requests-t.json", _requests())
    path = folder / "requests-t.json"
    path.chmod(0o666)
    assert request_cache.load("requests-t.json") is None
    path.chmod(0o600)
    assert request_cache.load("requests-t.json") is not None
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, OTHER_UID)
        assert request_cache.load("requests-t.json") is None
        os.chown(path, 0, 0)
        os.chown(folder, OTHER_UID, OTHER_UID)  # the folder itself is another user's
        assert request_cache.load("requests-t.json") is None  # they could have swapped entries
        request_cache.save("requests-u.json", _requests())
        assert not (folder / "requests-u.json").exists()  # never written into their folder
