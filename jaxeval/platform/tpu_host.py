"""Whether this host has a TPU attached, and a quiet libtpu where it has none.

With libtpu installed (the test extra, `jaxeval[tpu]`, a TPU image's Python) JAX offers the TPU
backend on every host. On a host without a TPU, libtpu's start-up then looks for the VM's TPU
metadata, finds none, and writes five lines to stderr ("Failed to find host bounds for accelerator
type", "Logging before InitGoogle()", "E0000 ... unexpected worker hostname", a "Source Location
Trace") before JAX falls back to the CPU. Nothing is wrong, yet it reads like a crash. The same
lines come when `jaxeval plan --topology` loads libtpu as its compiler.

`quiet_absent_tpu()` gives libtpu the two answers it looks for on a host it knows has no TPU: one
worker (`TPU_WORKER_HOSTNAMES=localhost`) and a one-chip host (`TPU_HOST_BOUNDS=1,1,1`), plus
`TPU_SKIP_MDS_QUERY=1` (no metadata server). Only when no TPU is attached, and only where the user
has set neither of the two host answers: a TPU VM keeps every variable it had, so the TPU backend starts as before.
Compiling for a described slice (`jaxeval.plan.topology`) does not read them: the slice's figures
are the same with and without.

A TPU counts as attached when the host shows any device a TPU runtime uses: an `/dev/accel*` node
(v2-v4), a numbered `/dev/vfio/` group (v5e, v5p, v6e) or a PCI processing accelerator of Google's
vendor id. Any of them, or a sysfs that cannot be read, counts as attached: in doubt, nothing is
changed.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from pathlib import Path

GOOGLE_PCI_VENDOR = "0x1ae0"
PROCESSING_ACCELERATOR_CLASS = "0x12"  # PCI base class 0x12: processing accelerators
QUIET_ENV = {
    "TPU_SKIP_MDS_QUERY": "1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_HOST_BOUNDS": "1,1,1",
}


def tpu_attached(root: str = "/") -> bool:
    """Whether the host at `root` shows a TPU (module docstring); True when it cannot tell."""
    base = Path(root)
    if glob.glob(str(base / "dev" / "accel*")):
        return True
    vfio = base / "dev" / "vfio"
    if vfio.is_dir() and any(p.name.isdigit() for p in vfio.iterdir()):
        return True
    pci = base / "sys" / "bus" / "pci" / "devices"
    if not pci.is_dir():
        return True
    try:
        for dev in pci.iterdir():
            vendor = (dev / "vendor").read_text().strip().lower()
            klass = (dev / "class").read_text().strip().lower()
            if vendor == GOOGLE_PCI_VENDOR and klass.startswith(PROCESSING_ACCELERATOR_CLASS):
                return True
    except OSError:
        return True
    return False


def quiet_absent_tpu(root: str = "/") -> bool:
    """Sets libtpu's host answers (module docstring) when libtpu is installed, no TPU is attached
    and the user set none of them; True if it did. Call before JAX starts a backend."""
    if importlib.util.find_spec("libtpu") is None:
        return False
    if "JAX_FORCE_TPU_INIT" in os.environ:
        return False
    if "TPU_WORKER_HOSTNAMES" in os.environ or "TPU_HOST_BOUNDS" in os.environ:
        return False
    if tpu_attached(root):
        return False
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    return True
