"""The task index: lm-eval's catalogue discovered under our library, the on-disk cache, `!function`."""

from __future__ import annotations

import json
import os
import textwrap
import time

import pytest

from jaxeval.api import task_index
from jaxeval.api.task_manager import Kind, TaskManager
from jaxeval.api.yaml_loader import load_yaml
from jaxeval.errors import JaxevalError


@pytest.fixture()
def index_cache(tmp_path, monkeypatch):
    folder = tmp_path / "index_cache"
    monkeypatch.setenv("JAXEVAL_INDEX_CACHE", str(folder))
    return folder


def _write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_catalogue_names_are_found_and_ours_win():
    tm = TaskManager()
    for name in ("bbh", "leaderboard", "mmlu_pro", "arc_challenge_chat", "leaderboard_ifeval"):
        assert name in tm.index, name
        assert tm.source_of(name) == "lm-eval"
    # our library mirrors these; its files win over lm-eval's copies
    for name in ("arc_easy", "mmlu", "gsm8k", "hellaswag"):
        assert tm.source_of(name) == "jaxeval"
        assert "site-packages" not in str(tm.index[name].yaml_path)
    # squadv2 is an lm-eval Python class task: indexed; without its data the class cannot be built
    assert tm.index["squadv2"].py_class
    with pytest.raises(JaxevalError, match=r"lm-eval task class .*SQuAD2"):
        tm.load(["squadv2"])


def test_catalogue_can_be_switched_off_and_the_hint_names_the_extra(monkeypatch):
    monkeypatch.setenv("JAXEVAL_CATALOGUE", "0")
    tm = TaskManager()
    assert "bbh" not in tm.index and "arc_easy" in tm.index
    with pytest.raises(JaxevalError, match="JAXEVAL_CATALOGUE=0"):
        tm.load(["bbh"])
    monkeypatch.setattr("jaxeval.api.task_manager.lm_eval_task_dir", lambda: None)
    with pytest.raises(JaxevalError, match=r"jaxeval\[tasks\]") as e:
        TaskManager().load(["bbh"])
    assert "unknown task, group or tag 'bbh'" in str(e.value)


def test_include_path_wins_over_both(tmp_path):
    _write(tmp_path, "mine.yaml", "task: bbh\noutput_type: loglikelihood\n")
    tm = TaskManager(str(tmp_path))
    assert tm.source_of("bbh") == "include" and tm.index["bbh"].kind is Kind.TASK


def test_index_cache_is_warm_fast_and_follows_file_changes(tmp_path, index_cache):
    root = tmp_path / "tasks"
    _write(root, "a/a.yaml", "task: a\ntag: [t]\noutput_type: loglikelihood\n")
    _write(root, "b/_tmpl_yaml", "output_type: loglikelihood\ntag: t\n")
    _write(root, "b/b.yaml", "include: _tmpl_yaml\ntask: b\n")
    first = task_index.index_folder(root, "include")
    assert sorted(first["t"].tags) == ["a", "b"]
    cache_files = list(index_cache.glob("*.json"))
    assert len(cache_files) == 1
    data = json.loads(cache_files[0].read_text())
    assert {row[0] for row in data["entries"]} == {"a", "b", "t"}
    # a changed template changes the key: b's tag moves
    tmpl = root / "b" / "_tmpl_yaml"
    tmpl.write_text("output_type: loglikelihood\ntag: u\n")
    os.utime(tmpl, ns=(time.time_ns(), time.time_ns() + 10**9))
    second = task_index.index_folder(root, "include")
    assert second["t"].tags == {"a"} and second["u"].tags == {"b"}
    # a corrupt cache file is rebuilt, never trusted
    cache_files[0].write_text("{not json")
    assert task_index.index_folder(root, "include").keys() == second.keys()


def test_warm_catalogue_index_is_well_under_two_seconds():
    TaskManager()  # builds the cache if this machine has none yet
    # the best of three: the suite's other workers compile beside this one, and a loaded
    # scheduler's pause is not the index's time
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        tm = TaskManager()
        timings.append(time.perf_counter() - start)
    elapsed = min(timings)
    assert len(tm.index) > 14_000
    assert elapsed < 2.0, f"warm index took {elapsed:.2f} s"


def test_function_may_only_reach_modules_beside_the_yaml_or_task_packages(tmp_path):
    path = _write(tmp_path, "evil.yaml", "task: evil\nprocess_docs: !function os.system\n")
    with pytest.raises(JaxevalError) as e:
        load_yaml(path)
    text = str(e.value)
    assert "evil.yaml" in text and "!function os.system" in text and "not beside the YAML" in text
    # importing the name into a helper does not make it callable from YAML
    _write(
        tmp_path, "utils.py", "from os import system  # noqa: F401\n\ndef ok(x):\n    return x\n"
    )
    path = _write(tmp_path, "sneaky.yaml", "task: s\nprocess_docs: !function utils.system\n")
    with pytest.raises(
        JaxevalError, match="not a function, class or filter defined in module 'utils'"
    ) as e:
        load_yaml(path)
    assert "sneaky.yaml" in str(e.value) and "!function utils.system" in str(e.value)
    assert (
        load_yaml(_write(tmp_path, "ok.yaml", "task: o\nprocess_docs: !function utils.ok\n"))[
            "process_docs"
        ](3)
        == 3
    )
    # lm-eval's task package is reachable by its dotted name
    cfg = load_yaml(
        _write(
            tmp_path,
            "pkg.yaml",
            "task: p\nprocess_docs: !function lm_eval.tasks.hellaswag.utils.process_docs\n",
        )
    )
    assert cfg["process_docs"].__name__ == "process_docs"


def test_function_in_an_included_template_resolves_beside_the_template(tmp_path):
    _write(tmp_path, "common/utils.py", "def proc(x):\n    return ('common', x)\n")
    _write(
        tmp_path,
        "common/_base_yaml",
        "output_type: loglikelihood\nprocess_docs: !function utils.proc\n",
    )
    _write(tmp_path, "lang/utils.py", "def proc(x):\n    return ('lang', x)\n")
    path = _write(tmp_path, "lang/t.yaml", "include: ../common/_base_yaml\ntask: t\n")
    assert load_yaml(path)["process_docs"](1) == ("common", 1)


def test_a_helper_that_fails_to_import_is_not_kept_half_loaded(tmp_path):
    _write(
        tmp_path,
        "utils.py",
        "def early(x):\n    return x\n\nimport no_such_pkg_xyz  # noqa\n\n"
        "def late(x):\n    return x\n",
    )
    path = _write(tmp_path, "t.yaml", "task: t\nprocess_docs: !function utils.late\n")
    for _ in range(2):  # the second load reports the import error again, not "has no function"
        with pytest.raises(JaxevalError, match="cannot import module 'utils'.*no_such_pkg_xyz"):
            load_yaml(path)


def _rows_of(index_cache):
    (cache_file,) = index_cache.glob("*.json")
    return cache_file, json.loads(cache_file.read_text())


@pytest.mark.parametrize("where", ["../../x/evil.yaml", "absolute", "linked/evil.yaml"])
def test_a_row_leading_outside_the_folder_is_never_loaded(tmp_path, index_cache, where):
    """The repro: a row naming `../../x/evil.yaml` loaded that file and its `!function` module.
    Rows must name YAML files the scan found; anything else rebuilds the folder's index."""
    outside = tmp_path / "x"
    _write(
        outside,
        "utils.py",
        f"open({str(tmp_path / 'ran')!r}, 'w').close()\ndef f(d):\n    return d\n",
    )
    evil = _write(
        outside,
        "evil.yaml",
        "task: evil\noutput_type: loglikelihood\nprocess_docs: !function utils.f\n",
    )
    root = tmp_path / "a" / "b" / "tasks"
    _write(root, "t.yaml", "task: t\noutput_type: loglikelihood\n")
    os.symlink(outside, root / "linked")
    task_index.index_folder(root, "include")
    cache_file, data = _rows_of(index_cache)
    rel = str(evil) if where == "absolute" else where
    data["entries"].append(["evil", "task", rel, [], None])
    cache_file.write_text(json.dumps(data))
    entries = task_index.index_folder(root, "include")
    assert sorted(entries) == ["t"]
    assert not (tmp_path / "ran").exists()
    _, data = _rows_of(index_cache)
    assert [row[0] for row in data["entries"]] == ["t"]  # rebuilt from the folder's files


def test_ls_tasks_with_a_null_name_in_the_index(tmp_path, index_cache, capsys, monkeypatch):
    from jaxeval.cli import main

    monkeypatch.setenv("JAXEVAL_CATALOGUE", "0")  # only our library and the folder: quick

    root = tmp_path / "tasks"
    _write(root, "t.yaml", "task: t\noutput_type: loglikelihood\n")
    task_index.index_folder(root, "include")
    (cache_file,) = [p for p in index_cache.glob("*.json") if str(root) in p.read_text()]
    data = json.loads(cache_file.read_text())
    data["entries"][0][0] = None
    cache_file.write_text(json.dumps(data))
    assert main(["ls", "tasks", "--include_path", str(root)]) == 0
    assert "\nt " in capsys.readouterr().out


def test_an_index_file_of_another_user_is_not_read(tmp_path, index_cache, monkeypatch):
    from jaxeval import paths

    monkeypatch.setattr(paths, "_warned", set(), raising=False)
    root = tmp_path / "tasks"
    _write(root, "t.yaml", "task: t\noutput_type: loglikelihood\n")
    task_index.index_folder(root, "include")
    cache_file, data = _rows_of(index_cache)
    assert oct(cache_file.stat().st_mode & 0o777) == oct(0o600)
    assert oct(index_cache.stat().st_mode & 0o777) == oct(0o700)
    data["entries"][0][3] = ["planted"]  # a row that is valid, but not what the folder says
    cache_file.write_text(json.dumps(data))
    cache_file.chmod(0o666)
    assert task_index.index_folder(root, "include")["t"].tags == set()
    if os.geteuid() == 0:
        cache_file.write_text(json.dumps(data))
        cache_file.chmod(0o600)
        os.chown(cache_file, 65534, 65534)
        assert task_index.index_folder(root, "include")["t"].tags == set()
