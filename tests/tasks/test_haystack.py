"""RULER's essay haystack and BABILong's rows from local files, and the errors when they are missing.

Fast: no model runs. The documents are built by lm-eval's own RULER / BABILong helpers (the
catalogue), with a tokenizer trained here; tests/tasks/test_long_context_parity.py runs the same
tasks end to end against lm-eval's HF backend.
"""

from __future__ import annotations

import importlib
import json
import socket
import sys
from pathlib import Path

import pytest

from jaxeval.api import requirements
from jaxeval.api.custom_dataset import LocalHub
from jaxeval.api.haystack import essay_words, find_haystack, read_haystack_texts
from jaxeval.errors import JaxevalError
from tests.conftest import TEST_DATA
from tests.tasks.long_context import BABILONG, HAYSTACK, haystack_texts, served_hub, write_punkt_tab

pytest.importorskip("wonderwords", reason="lm-eval's RULER helpers need wonderwords")
pytest.importorskip("nltk", reason="lm-eval's RULER helpers need nltk")

RULER_HELPERS = ("lm_eval.tasks.ruler.prepare_niah", "lm_eval.tasks.ruler.niah_utils")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from tests.helpers.tiny_models import tokenizer_for

    return tokenizer_for("llama", str(tmp_path_factory.mktemp("tok")))


@pytest.fixture
def no_network(monkeypatch):
    """Every attempt to resolve a host or open a connection is recorded and refused."""
    attempts: list[tuple] = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network attempted in a test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return attempts


@pytest.fixture
def punkt(tmp_path, monkeypatch):
    import nltk

    root = write_punkt_tab(tmp_path / "nltk_data", haystack_texts())
    monkeypatch.setattr(nltk.data, "path", [str(root), *nltk.data.path])
    return root


def _manager(**kwargs):
    from jaxeval.api.task_manager import TaskManager

    return TaskManager(**kwargs)


def _ruler(name: str):
    return importlib.import_module(f"lm_eval.tasks.ruler.{name}")


# ---------------------------------------------------------------- where the haystack comes from
def test_metadata_haystack_wins_over_data_dir_and_a_missing_path_is_an_error(tmp_path):
    hub = tmp_path / "data" / "paul_graham_essays"
    hub.mkdir(parents=True)
    (hub / "train.jsonl").write_text(json.dumps({"text": "An essay."}) + "\n")
    mine = tmp_path / "mine.txt"
    mine.write_text("My text.")
    data_dir = str(tmp_path / "data")
    assert find_haystack({"haystack": str(mine)}, data_dir, task="t") == str(mine)
    assert find_haystack({}, data_dir, task="t") == str(hub / "train.jsonl")
    assert find_haystack({}, None, task="t") is None
    assert find_haystack({}, str(tmp_path), task="t") is None
    with pytest.raises(JaxevalError) as e:
        find_haystack({"haystack": str(tmp_path / "nope.txt")}, data_dir, task="niah_single_2")
    assert e.value.task == "niah_single_2" and e.value.field == "metadata.haystack"
    assert "nope.txt does not exist" in str(e.value) and "--metadata haystack=PATH" in str(e.value)


def test_haystack_forms_text_file_folder_and_rows(tmp_path):
    (tmp_path / "one.txt").write_text("Alpha  beta.\n\nGamma.")
    folder = tmp_path / "essays"
    folder.mkdir()
    (folder / "b.txt").write_text("Second.")
    (folder / "a.txt").write_text("First.")
    (folder / "notes.md").write_text("not read")
    (tmp_path / "pages.jsonl").write_text(
        json.dumps({"page": " = Title = \n Body ."}) + "\n" + json.dumps({"page": "More"}) + "\n"
    )
    (tmp_path / "rows.json").write_text(json.dumps([{"text": "x"}, {"text": None}]))
    assert read_haystack_texts(str(tmp_path / "one.txt"), task="t") == ["Alpha  beta.\n\nGamma."]
    assert read_haystack_texts(str(folder), task="t") == ["First.", "Second."]
    assert read_haystack_texts(str(tmp_path / "pages.jsonl"), task="t") == [
        " = Title = \n Body .",
        "More",
    ]
    assert read_haystack_texts(str(tmp_path / "rows.json"), task="t") == ["x", ""]
    assert read_haystack_texts(str(HAYSTACK), task="t") == haystack_texts()
    assert essay_words(["Alpha  beta.\n\nGamma.", "Delta"]) == ["Alpha", "beta.", "Gamma.", "Delta"]


@pytest.mark.parametrize(
    "name,content,says",
    [
        ("bad.jsonl", json.dumps({"title": "no text"}) + "\n", "row 0 of the haystack has no"),
        ("empty.txt", "   \n", "the data file is empty"),
        ("blank.jsonl", json.dumps({"text": "  "}) + "\n", "holds no text"),
        ("essays.docx", "binary", "expected a .txt file, a folder of .txt files"),
    ],
)
def test_unreadable_haystacks_are_named(tmp_path, name, content, says):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(JaxevalError) as e:
        read_haystack_texts(str(path), task="niah_single_2")
    assert says in str(e.value) and e.value.task == "niah_single_2"


def test_essay_words_equal_lm_eval_get_haystack_on_the_same_rows(monkeypatch):
    import datasets
    import nltk

    monkeypatch.setattr(nltk, "download", lambda *a, **k: False)  # its import may ask (offline)
    prepare_niah = _ruler("prepare_niah")
    monkeypatch.setattr(datasets, "load_dataset", served_hub(datasets.load_dataset))
    theirs = prepare_niah.get_haystack.__wrapped__("essay")  # lm-eval's, uncached
    ours = essay_words(read_haystack_texts(str(HAYSTACK), task="t"))
    assert ours == theirs and len(ours) > 2000


# ---------------------------------------------------------------- RULER essay tasks
@pytest.mark.parametrize("task", ["niah_single_2", "niah_multikey_1"])
def test_essay_task_without_haystack_fails_before_any_network(tokenizer_dir, no_network, task):
    manager = _manager(metadata={"pretrained": tokenizer_dir, "max_seq_lengths": [4096]})
    with pytest.raises(JaxevalError) as e:
        manager.load([task])
    text = str(e.value)
    assert e.value.task == task and e.value.field == "metadata.haystack"
    assert "baber/paul_graham_essays" in text and "--metadata haystack=PATH" in text
    assert "paul_graham_essays/train.jsonl" in text
    assert no_network == []
    original = _ruler("prepare_niah").get_haystack
    assert _ruler("niah_utils").get_haystack is original  # lm-eval's module is as before


def test_essay_task_builds_its_documents_from_the_local_haystack(tokenizer_dir, punkt, no_network):
    manager = _manager(
        metadata={
            "pretrained": tokenizer_dir,
            "max_seq_lengths": [2048],
            "haystack": str(HAYSTACK),
        }
    )
    task = manager.load(["niah_single_2"]).tasks["niah_single_2"]
    docs = task.eval_docs
    assert len(docs) == 500 and all(d["max_length"] == 2048 for d in docs)
    assert all(d["outputs"][0] in d["input"] and d["length"] <= 2048 for d in docs)
    assert "Robert Boulter" in docs[0]["input"]  # the first WikiText line
    assert "The grass is green" not in docs[0]["input"]  # not the repeat haystack
    assert no_network == []


def test_haystack_in_data_dir_serves_the_essay_tasks(tokenizer_dir, punkt, tmp_path):
    hub = tmp_path / "paul_graham_essays"
    hub.mkdir()
    (hub / "train.jsonl").write_text(HAYSTACK.read_text())
    manager = _manager(
        metadata={"pretrained": tokenizer_dir, "max_seq_lengths": [2048]}, data_dir=str(tmp_path)
    )
    docs = manager.load(["niah_multivalue"]).tasks["niah_multivalue"].eval_docs
    assert len(docs[0]["outputs"]) == 4 and "Robert Boulter" in docs[0]["input"]


def test_essay_task_without_punkt_says_what_to_fetch(tokenizer_dir, monkeypatch, no_network):
    monkeypatch.setattr(requirements, "has_nltk_resource", lambda resource: False)
    manager = _manager(
        metadata={"pretrained": tokenizer_dir, "max_seq_lengths": [4096], "haystack": str(HAYSTACK)}
    )
    with pytest.raises(JaxevalError) as e:
        manager.load(["niah_single_3"])
    assert "punkt_tab" in str(e.value) and requirements.FETCH_PUNKT in str(e.value)
    assert e.value.task == "niah_single_3" and no_network == []


def test_repeat_haystack_task_needs_no_local_text(tokenizer_dir, no_network):
    manager = _manager(metadata={"pretrained": tokenizer_dir, "max_seq_lengths": [4096]})
    docs = manager.load(["niah_single_1"]).tasks["niah_single_1"].eval_docs
    assert len(docs) == 500 and "The grass is green." in docs[0]["input"]
    assert no_network == []


def test_importing_ruler_helpers_offline_never_calls_nltk_download(monkeypatch):
    """prepare_niah.py (imported by niah_utils.py) downloads punkt_tab at import when the data is
    missing; offline, jaxeval's import of the helper makes that call a no-op."""
    import nltk

    from jaxeval.api.yaml_loader import resolve_function
    from tests.tasks.oracle import lm_eval_tasks_dir

    for name in RULER_HELPERS:
        monkeypatch.delitem(sys.modules, name, raising=False)
    find = nltk.data.find

    def missing_punkt(resource, *args, **kwargs):
        if "punkt_tab" in resource:
            raise LookupError(resource)
        return find(resource, *args, **kwargs)

    calls: list = []
    monkeypatch.setattr(nltk.data, "find", missing_punkt)
    monkeypatch.setattr(nltk, "download", lambda *a, **k: calls.append(a) or False)
    folder = Path(lm_eval_tasks_dir()) / "ruler"
    fn = resolve_function("niah_utils.niah_single_1", folder, source=folder / "niah_single_1.yaml")
    assert fn.__name__ == "niah_single_1" and calls == []
    assert getattr(nltk.download, "__name__", "") == "<lambda>"  # put back after the import


@pytest.mark.parametrize("offline", [True, False])
def test_nltk_download_at_helper_import_is_skipped_only_offline(tmp_path, monkeypatch, offline):
    import nltk

    from jaxeval.api.yaml_loader import resolve_function

    (tmp_path / "helper.py").write_text("from fetch import done\n\ndef fn():\n    return done\n")
    (tmp_path / "fetch.py").write_text("import nltk\n\ndone = nltk.download('punkt_tab')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fetch", raising=False)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1") if offline else monkeypatch.delenv(name, raising=False)
    calls: list = []
    monkeypatch.setattr(nltk, "download", lambda *a, **k: calls.append(a) or True)
    fn = resolve_function("helper.fn", tmp_path, source=tmp_path / "t.yaml")
    assert (fn(), calls) == ((False, []) if offline else (True, [("punkt_tab",)]))


# ---------------------------------------------------------------- BABILong
def test_babilong_reads_its_config_from_data_dir():
    import datasets

    manager = _manager(metadata={"max_seq_lengths": "4k"}, data_dir=str(TEST_DATA))
    task = manager.load(["babilong_qa1"]).tasks["babilong_qa1"]
    rows = [json.loads(line) for line in BABILONG.read_text().splitlines()]
    assert task.eval_docs == rows and set(rows[0]) == {"input", "question", "target"}
    helper = task.config.custom_dataset
    assert helper.__globals__["datasets"] is datasets  # lm-eval's module is as before


@pytest.mark.parametrize("data_dir", [True, False])
def test_babilong_without_its_rows_names_the_file_to_add(tmp_path, data_dir):
    (tmp_path / "babilong-1k-samples" / "4k").mkdir(parents=True)
    (tmp_path / "babilong-1k-samples" / "4k" / "qa1.jsonl").write_text(BABILONG.read_text())
    manager = _manager(
        metadata={"max_seq_lengths": "2k"}, data_dir=str(tmp_path) if data_dir else None
    )
    with pytest.raises(JaxevalError) as e:
        manager.load(["babilong_qa1"])
    text = str(e.value)
    assert e.value.task == "babilong_qa1" and "RMT-team/babilong-1k-samples" in text
    expected = f"{tmp_path}/babilong-1k-samples/2k/qa1.jsonl" if data_dir else "DIR/"
    assert expected in text and "--data_dir" in text  # 4k rows never stand in for 2k


def test_local_hub_passes_everything_else_to_datasets():
    import datasets

    hub = LocalHub(datasets, "t", None)
    assert hub.Dataset is datasets.Dataset and hub.Split is datasets.Split
    rows = hub.load_dataset("json", data_files={"x": str(BABILONG)}, split="x")
    assert len(rows) == 5
