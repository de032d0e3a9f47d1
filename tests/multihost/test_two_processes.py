"""Two JAX processes x 2 fake CPU devices = one 4-device `data` mesh, against a 1-device run.

    process 0 ─┐  gloo, coordinator 127.0.0.1:<free port>   results + samples + caches, table
    process 1 ─┘                                            None, no file, no table
    reference   (one process, one device)                   results compared with process 0's

All three run `jaxeval run` (tests/multihost/worker.py) on the same tiny Llama checkpoint over a
loglikelihood task (arc_easy), a rolling task (wikitext) and a generation task (gsm8k, 8 new
tokens), with --log_samples, --use_cache and --cache_requests, all at once, under one hard timeout.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers.tiny_models import make_tiny_checkpoint

pytestmark = pytest.mark.slow

WORKER = pathlib.Path(__file__).with_name("worker.py")
TIMEOUT_S = 120
LIMIT = 4
TOL = 1e-5


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(devices: int, cache: pathlib.Path, process: tuple[int, int, int] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXEVAL_")}
    env["JAXEVAL_CACHE"] = os.environ["JAXEVAL_CACHE"]  # the session's cache root (conftest)
    env.update(
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        JAXEVAL_CACHE_PATH=str(cache),
    )
    if process is not None:
        port, pid, n = process
        env.update(
            JAXEVAL_COORDINATOR=f"127.0.0.1:{port}",
            JAXEVAL_NUM_PROCESSES=str(n),
            JAXEVAL_PROCESS_ID=str(pid),
        )
    return env


def _launch(
    name: str,
    root: pathlib.Path,
    ckpt: pathlib.Path,
    data: pathlib.Path,
    *,
    devices: int,
    mesh: str,
    process: tuple[int, int, int] | None,
) -> tuple[subprocess.Popen, dict]:
    out = root / name
    out.mkdir()
    cfg = {
        "ckpt": str(ckpt),
        "data": str(data),
        "out": str(out / "files"),
        "returned": str(out / "returned.json"),
        "mesh": mesh,
        "limit": LIMIT,
        "distributed": process is not None,
    }
    log = open(out / "log.txt", "w")
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps(cfg)],
        env=_env(devices, out / "files" / "requests", process),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    return proc, {"dir": out, **cfg}


def _wait_all(procs: dict[str, subprocess.Popen], deadline: float) -> dict[str, int]:
    codes: dict[str, int] = {}
    try:
        for name, proc in procs.items():
            codes[name] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for proc in procs.values():  # never leave a process (or its children) behind
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return codes


def _files(folder: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _close(a, b, where: str) -> None:
    """Nested lists of floats / bools / strings: floats within TOL (relative), the rest equal."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=TOL, abs_tol=TOL), f"{where}: {a} != {b}"
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} != {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_two_processes_match_one_device(tmp_path, data_root):
    ckpt = make_tiny_checkpoint("llama", str(tmp_path / "ckpt"))
    port = _free_port()
    start = time.monotonic()
    runs = {
        "p0": _launch(
            "p0", tmp_path, ckpt, data_root, devices=2, mesh="data", process=(port, 0, 2)
        ),
        "p1": _launch(
            "p1", tmp_path, ckpt, data_root, devices=2, mesh="data", process=(port, 1, 2)
        ),
        "ref": _launch("ref", tmp_path, ckpt, data_root, devices=1, mesh="single", process=None),
    }
    codes = _wait_all({k: p for k, (p, _) in runs.items()}, start + TIMEOUT_S)
    logs = {k: (cfg["dir"] / "log.txt").read_text(errors="replace") for k, (_, cfg) in runs.items()}
    for name in runs:
        assert codes.get(name) == 0, (
            f"{name} exited with {codes.get(name, 'a timeout')} after {time.monotonic() - start:.0f}s;"
            f" log tail:\n{logs[name][-3000:]}"
        )

    def returned(name):
        return json.loads(pathlib.Path(runs[name][1]["returned"]).read_text())

    ours, ref = returned("p0"), returned("ref")
    assert returned("p1") is None
    assert ours["config"]["mesh"] == {"data": 4, "fsdp": 1, "model": 1}
    assert ref["config"]["mesh"] == {"data": 1, "fsdp": 1, "model": 1}

    # Only process 0 writes (results, samples, response cache, request cache) and prints the table.
    p0_files, p1_dir = _files(runs["p0"][1]["dir"] / "files"), runs["p1"][1]["dir"] / "files"
    assert not p1_dir.exists() or _files(p1_dir) == []
    for pattern in (
        "results_",
        "samples_arc_easy_",
        "samples_wikitext_",
        "samples_gsm8k_",
        "cache_rank0.db",
        "requests-arc_easy-",
    ):
        assert any(pattern in f for f in p0_files), (pattern, p0_files)
    assert "|Tasks" in logs["p0"] and "|Tasks" not in logs["p1"]

    # Same requests, same answers (per request), same metrics as the 1-device run.
    assert set(ours["results"]) == set(ref["results"]) == {"arc_easy", "wikitext", "gsm8k"}
    for task, metrics in ref["results"].items():
        assert set(ours["results"][task]) == set(metrics), task
        for key, value in metrics.items():
            _close(ours["results"][task][key], value, f"{task} {key}")
    for task, rows in ref["samples"].items():
        got = ours["samples"][task]
        assert [r["doc_id"] for r in got] == [r["doc_id"] for r in rows], task
        assert len(rows) == LIMIT * (1 if task != "gsm8k" else 2)  # gsm8k: two filters
        for mine, theirs in zip(got, rows):
            assert mine["arguments"] == theirs["arguments"], (task, theirs["doc_id"])
            _close(mine["resps"], theirs["resps"], f"{task} doc {theirs['doc_id']} resps")
            _close(
                mine["filtered_resps"], theirs["filtered_resps"], f"{task} doc {theirs['doc_id']}"
            )
