"""A host without a TPU: libtpu installed, yet no libtpu, XLA or transformers start-up lines from
the command.

The rule (`jaxeval.platform.tpu_host`) is tested on made-up host trees; the commands themselves
(`run`, `demo`, `validate`, `ls`, `plan`, `plan --topology`) run in subprocesses with JAX left to
choose its platforms, as a user's shell would, and their stderr is read.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxeval.platform import tpu_host
from tests.helpers.tiny_models import tiny_checkpoint

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
# what libtpu and XLA print when they start on a host without a TPU
NOISE = (
    "Failed to find host bounds",
    "InitGoogle",
    "E0000",
    "Source Location Trace",
    "TPU_ACCELERATOR_TYPE",
    "TPU_WORKER_HOSTNAMES",
    "libtpu",
    "PyTorch was not found",  # transformers' advice for its own models, which jaxeval never runs
)


def _host(tmp_path: Path, *, pci: dict[str, tuple[str, str]] | None = None, dev=()) -> str:
    root = tmp_path / "host"
    devices = root / "sys" / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    for name, (vendor, klass) in (pci or {}).items():
        (devices / name).mkdir()
        (devices / name / "vendor").write_text(vendor + "\n")
        (devices / name / "class").write_text(klass + "\n")
    for node in dev:
        path = root / "dev" / node
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return str(root)


def test_a_host_shows_a_tpu_by_its_device_nodes_or_pci_class(tmp_path):
    nic = {"0000:00:04.0": ("0x1ae0", "0x020000")}  # Google's gVNIC: a network card, not a TPU
    assert not tpu_host.tpu_attached(_host(tmp_path / "cpu", pci=nic))
    tpu = {"0000:00:05.0": ("0x1ae0", "0x120000")}
    assert tpu_host.tpu_attached(_host(tmp_path / "pci", pci=tpu))
    assert tpu_host.tpu_attached(_host(tmp_path / "v4", dev=["accel0"]))
    assert tpu_host.tpu_attached(_host(tmp_path / "v5e", dev=["vfio/0"]))
    assert not tpu_host.tpu_attached(_host(tmp_path / "vfio", dev=["vfio/vfio"]))
    assert tpu_host.tpu_attached(str(tmp_path / "no-sysfs"))  # cannot tell: attached


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed")
def test_the_host_answers_are_set_only_without_a_tpu_and_never_over_the_users(
    tmp_path, monkeypatch
):
    for key in (*tpu_host.QUIET_ENV, "JAX_FORCE_TPU_INIT"):
        monkeypatch.setenv(key, "")  # recorded, so the teardown restores the process's value
        monkeypatch.delenv(key)
    tpu = _host(tmp_path / "tpu", dev=["accel0"])
    assert not tpu_host.quiet_absent_tpu(tpu) and "TPU_HOST_BOUNDS" not in os.environ
    cpu = _host(tmp_path / "cpu")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "10.0.0.2,10.0.0.3")
    assert not tpu_host.quiet_absent_tpu(cpu) and "TPU_HOST_BOUNDS" not in os.environ
    monkeypatch.delenv("TPU_WORKER_HOSTNAMES")
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "0")
    assert tpu_host.quiet_absent_tpu(cpu)
    assert os.environ["TPU_HOST_BOUNDS"] == "1,1,1"
    assert os.environ["TPU_WORKER_HOSTNAMES"] == "localhost"
    assert os.environ["TPU_SKIP_MDS_QUERY"] == "0"  # the user's value stays


def _command_stderr(*argv: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", *tpu_host.QUIET_ENV)}
    env.update(JAXEVAL_COMPILATION_CACHE="off", XLA_FLAGS="")
    proc = subprocess.run(
        [sys.executable, "-m", "jaxeval", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed")
@pytest.mark.skipif(tpu_host.tpu_attached(), reason="this host has a TPU")
def test_commands_print_no_libtpu_start_up_lines_on_a_cpu_host(tmp_path):
    ckpt = tiny_checkpoint("llama")
    model_args = f"pretrained={ckpt},dtype=float32"
    data = ["--data_dir", str(DATA)]
    commands = {
        "run": ["run", "--model", "jax", "--model_args", model_args, "--tasks", "arc_easy"]
        + ["--limit", "2", *data, "--output_path", str(tmp_path / "out")],
        "demo": ["demo", "--tiny", "--limit", "1", "--model_dir", str(tmp_path / "tiny")],
        "validate": ["validate", "--tasks", "arc_easy", *data],
        "ls": ["ls", "tasks"],
        "plan": ["plan", "--model_args", f"pretrained={ckpt}"],
        "plan --topology": ["plan", "--model_args", f"pretrained={ckpt}", "--topology", "v5e-8"]
        + ["--lengths", "128", "--no_generation", "--no_layer_costs"],
    }
    for name, argv in commands.items():
        err = _command_stderr(*argv, cwd=tmp_path)
        found = [line for line in err.splitlines() if any(n in line for n in NOISE)]
        assert not found, f"`jaxeval {name}` printed start-up lines: {found}"
