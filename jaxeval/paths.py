"""Where jaxeval keeps files between runs: one root, one folder per kind.

    cache_home()            $JAXEVAL_CACHE, else $XDG_CACHE_HOME/jaxeval, else ~/.cache/jaxeval
    cache_dir("xla")        <cache_home>/xla      compiled executables (`jaxeval.platform.compile_cache`)
    cache_dir("models")     <cache_home>/models   fetched checkpoints (`jaxeval.demo.fetch`)
    cache_dir("requests")   <cache_home>/requests built requests (`--cache_requests`)
    cache_dir("task_index") <cache_home>/task_index  lm-eval catalogue index
    cache_dir("kernels")    <cache_home>/kernels  C++ kernels built on this machine (`native_path`)

Files written into place (results, caches) get the mode a plain `open()` gives, 0o666 less
`current_umask()`.

Each kind may also have its own environment variable (`JAXEVAL_COMPILATION_CACHE`,
`JAXEVAL_CACHE_PATH`, `JAXEVAL_INDEX_CACHE`), which its module passes as `env`.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

# What a cache setting (a folder variable or flag) says to mean "no cache".
OFF = frozenset({"", "0", "off", "false", "none", "no"})


def cache_home() -> Path:
    """The root of every jaxeval cache folder (nothing is created here)."""
    root = os.environ.get("JAXEVAL_CACHE")
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "jaxeval"


def cache_dir(kind: str, env: str | None = None) -> Path:
    """`$env` when set, else `cache_home() / kind`."""
    override = os.environ.get(env) if env else None
    return Path(override).expanduser() if override else cache_home() / kind


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (`/proc/self/status`);
    elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def cxx_compiler() -> str | None:
    """The C++ compiler a kernel build uses: `$CXX`, else c++, g++ or clang++ (None: none found)."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(lines)))


def native_path(
    name: str, source: Path, compiler: str, flags: Sequence[str], extra: Sequence[str] = ()
) -> Path:
    """Where the library `name` built from `source` by `compiler` lives (or will): in
    `cache_dir("kernels")` under a name hashing the source, the compiler's version, the flags,
    `extra` (versions of what it links against) and the CPU model, since `-march=native` code
    runs only where it was built."""
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=30
    ).stdout
    key = hashlib.sha256()
    for part in (source.read_bytes(), version.encode(), " ".join(flags).encode(),
                 *(e.encode() for e in extra), platform.machine().encode(),
                 _cpu_model().encode()):  # fmt: skip
        key.update(part)
        key.update(b"\0")
    suffix = ".dylib" if platform.system() == "Darwin" else ".so"
    return cache_dir("kernels") / f"{name}-{key.hexdigest()[:16]}{suffix}"


def build_native(compiler: str, args: Sequence[str], source: Path, target: Path) -> None:
    """`compiler ARGS source -o target`, written to a temporary file in the target's folder and
    renamed into place (processes building at once are safe), mode as `open()` would give.
    Raises RuntimeError with the compiler's message when the build fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=target.suffix)
    os.close(fd)
    try:
        cmd = [compiler, *args, str(source), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()[-2000:]}")
        os.chmod(tmp, 0o777 & ~current_umask())  # ld keeps mkstemp's 0600 (adds x)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
