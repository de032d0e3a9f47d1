"""A finished run survives its save, and its files are readable by others.

* Files follow the umask (0644 under umask 022, as lm-eval's): results, samples, report, the
  response cache (never group- or other-writable); caches under the cache home are private.
* A full disk at save time (the write raises ENOSPC) or a file where `<output_path>/<model>` goes:
  the table is printed first, the error is one paragraph naming where the results went instead
  (a folder of the temporary directory, else stdout), and the output folder holds nothing half-made.
* A file where the results folder goes is found before the model loads.
* A save killed by SIGKILL leaves a hidden temporary, samples without results and its journal; the
  next save to that folder removes them, and never touches a live save's files.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jaxeval.cli import main
from jaxeval.lm.base import MODELS
from jaxeval.results import files, journal
from jaxeval.results.files import save_results
from tests.api import fake_lm

REPO = Path(__file__).resolve().parents[2]
MODEL_ARGS = "pretrained=/models/tiny-save"
FOLDER = "__models__tiny-save"  # the folder save_results names for MODEL_ARGS


@pytest.fixture(autouse=True)
def models(tmp_path, monkeypatch):
    """ "fake_save" answers every request; "never_save" must not be built. Temporary files (the
    fallback folder) go under the test's own folder."""
    cls = type(fake_lm.make_jaxeval_lm())

    class Never(cls):
        def __init__(self, **kwargs):
            raise AssertionError("the model was built before the bad output path was found")

    class Fake(cls):
        def __init__(self, **kwargs):
            pass

    MODELS.add("fake_save", Fake, replace=True)
    MODELS.add("never_save", Never, replace=True)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    yield


def run(out: Path, data_root: Path, model: str = "fake_save") -> int:
    args = ["run", "--model", model, "--model_args", MODEL_ARGS, "--tasks", "arc_easy"]
    args += ["--limit", "5", "--data_dir", str(data_root), "--bootstrap_iters", "0"]
    return main([*args, "--output_path", str(out), "--log_samples"])


def small_results(task: str = "arc_easy") -> dict:
    """A results dict as `simple_evaluate` returns it, with one logged sample."""
    sample = {
        "doc_id": 0,
        "doc": {"q": "1+1?"},
        "target": "2",
        "arguments": [("1+1?", " 2")],
        "resps": [[(-0.5, True)]],
        "filtered_resps": [(-0.5, True)],
        "filter": "none",
        "metrics": ["acc"],
        "doc_hash": "d",
        "prompt_hash": "p",
        "target_hash": "t",
        "acc": 1.0,
    }
    return {"results": {task: {"acc,none": 1.0}}, "samples": {task: [sample]}}


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _umask(mask: int):
    old = os.umask(mask)
    return lambda: os.umask(old)


# -- modes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask, want", [(0o022, 0o644), (0o027, 0o640)])
def test_files_follow_the_umask(tmp_path, mask, want):
    from jaxeval.cache import ResponseStore
    from jaxeval.report import load_runs, write_report

    restore = _umask(mask)
    try:
        results_file = save_results(
            small_results(), str(tmp_path / "out"), model_args=MODEL_ARGS, model_source="jax"
        )
        report = write_report(load_runs([str(results_file)]), tmp_path / "report.html")
        ResponseStore(str(tmp_path / "cache_rank0.db"))
    finally:
        restore()
    written = [results_file, *results_file.parent.glob("samples_*.jsonl"), report]
    written.append(tmp_path / "cache_rank0.db")
    assert len(written) == 4
    assert {p.name: oct(_mode(p)) for p in written} == {p.name: oct(want) for p in written}
    assert sorted(p.name for p in results_file.parent.iterdir()) == sorted(
        p.name for p in written[:2]
    )  # no temporary or journal left


# -- a failed save --------------------------------------------------------------------------------


def _fail_under(folder: Path, monkeypatch, only: str = ""):
    """`atomic_write` raises ENOSPC for files under `folder` (whose name holds `only`)."""
    real = files.atomic_write

    def write(path, text):
        if str(path).startswith(str(folder)) and only in path.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text)

    monkeypatch.setattr(files, "atomic_write", write)


def test_a_full_disk_at_save_keeps_the_results(tmp_path, data_root, capsys, monkeypatch):
    out = tmp_path / "out"
    _fail_under(out, monkeypatch, only="results_")  # the samples are written, the results not
    assert run(out, data_root) == 2
    captured = capsys.readouterr()
    assert "|arc_easy" in captured.out and "acc" in captured.out  # the table came first
    err = captured.err
    assert "No space left on device" in err and "output_path" in err and "Traceback" not in err
    (kept,) = (tmp_path / "tmp").glob("jaxeval-unsaved-*/results_*.json")
    assert str(kept) in err
    assert json.loads(kept.read_text())["results"]["arc_easy"]["acc,none"] >= 0
    assert list(kept.parent.glob("samples_arc_easy_*.jsonl"))  # samples kept beside it
    assert list((out / FOLDER).iterdir()) == []  # no samples without results, no temporaries


def test_results_go_to_stdout_when_no_folder_takes_them(tmp_path, capsys, monkeypatch):
    _fail_under(Path("/"), monkeypatch)  # every write fails
    with pytest.raises(Exception) as info:
        save_results(
            small_results(), str(tmp_path / "out"), model_args=MODEL_ARGS, model_source="x"
        )
    assert "standard output" in str(info.value) and "samples_arc_easy" in str(info.value)
    assert json.loads(capsys.readouterr().out)["results"] == {"arc_easy": {"acc,none": 1.0}}


def test_a_file_where_the_model_folder_goes_fails_before_the_model(tmp_path, data_root, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / FOLDER).write_text("keep me")
    assert run(out, data_root, model="never_save") == 2
    err = capsys.readouterr().err
    assert "a file is where the results folder" in err and str(out / FOLDER) in err
    assert (out / FOLDER).read_text() == "keep me"


def test_a_file_that_appears_where_the_folder_goes_during_the_run(tmp_path, data_root, capsys):
    out = tmp_path / "out"
    cls = type(fake_lm.make_jaxeval_lm())

    class Squatter(cls):
        def __init__(self, **kwargs):
            pass

        def loglikelihood(self, requests):
            out.mkdir(exist_ok=True)
            (out / FOLDER).write_text("in the way")
            return super().loglikelihood(requests)

    MODELS.add("fake_save", Squatter, replace=True)
    assert run(out, data_root) == 2
    captured = capsys.readouterr()
    assert "|arc_easy" in captured.out and "Traceback" not in captured.err
    (kept,) = (tmp_path / "tmp").glob("jaxeval-unsaved-*/results_*.json")
    assert str(kept) in captured.err and (out / FOLDER).read_text() == "in the way"


# -- a killed save --------------------------------------------------------------------------------

KILLED_SAVE = textwrap.dedent("""\
    import os, signal, sys
    from jaxeval.results.files import save_results
    from tests.results.test_save import MODEL_ARGS, small_results

    real = os.replace

    def replace(src, dst):  # SIGKILL as the results file is renamed into place
        if os.path.basename(dst).startswith("results_"):
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst)

    os.replace = replace
    save_results(small_results("killed_task"), sys.argv[1], model_args=MODEL_ARGS, model_source="x")
""")


def test_the_next_save_sweeps_what_a_killed_save_left(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_SAVE, str(out)], cwd=REPO, capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    left = sorted(p.name for p in (out / FOLDER).iterdir())
    assert [n for n in left if n.startswith("samples_killed_task_")]  # an orphan
    assert [n for n in left if n.startswith(".results_") and n.endswith(".tmp")]
    assert [n for n in left if n.startswith(journal.PREFIX)]

    saved = save_results(small_results(), str(out), model_args=MODEL_ARGS, model_source="x")
    assert sorted(p.name for p in saved.parent.iterdir()) == sorted(
        [saved.name, *(p.name for p in saved.parent.glob("samples_arc_easy_*.jsonl"))]
    )


def test_a_live_save_and_another_hosts_are_left_alone(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        entries = {
            "live": {"pid": sleeper.pid, "started": journal.process_started(sleeper.pid)},
            "other_host": {"pid": 1, "started": None, "host": "not-" + socket.gethostname()},
        }
        for tag, entry in entries.items():
            names = [f"samples_{tag}_1.jsonl", f"results_{tag}.json"]
            (folder / names[0]).write_text("{}\n")
            (folder / f".{names[1]}.abc.tmp").write_text("")
            entry = {"host": socket.gethostname(), "files": names, **entry}
            (folder / f"{journal.PREFIX}{tag}.json").write_text(json.dumps(entry))
        before = sorted(p.name for p in folder.iterdir())
        assert journal.sweep(folder) == []
        assert sorted(p.name for p in folder.iterdir()) == before
    finally:
        sleeper.kill()
        sleeper.wait()
    assert len(journal.sweep(folder)) == 3  # the sleeper is gone: its save's leftovers go


def test_the_cpu_kernel_library_is_private(tmp_path):
    """The attention kernel's library in the cache is private data, whatever the umask: the linker
    writes into mkstemp's 0600 file (a stand-in compiler does the same here), the build keeps it
    0600 in a 0700 folder (tests/platform/test_private_caches.py)."""
    from jaxeval.ops.attention import cpu

    fake = tmp_path / "cxx"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\necho lib > "$2"\n')
    fake.chmod(0o755)
    restore = _umask(0o022)
    try:
        cpu._build(str(fake), tmp_path / "kernels" / "lib.so")
    finally:
        restore()
    assert oct(_mode(tmp_path / "kernels" / "lib.so")) == oct(0o600)
    assert oct(_mode(tmp_path / "kernels")) == oct(0o700)
