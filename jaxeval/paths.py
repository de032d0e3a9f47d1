"""Where jaxeval keeps files between runs: one root, one folder per kind.

    cache_home()            $JAXEVAL_CACHE, else $XDG_CACHE_HOME/jaxeval, else ~/.cache/jaxeval
    cache_dir("xla")        <cache_home>/xla      compiled executables (`jaxeval.platform.compile_cache`)
    cache_dir("models")     <cache_home>/models   fetched checkpoints (`jaxeval.demo.fetch`)
    cache_dir("requests")   <cache_home>/requests built requests (`--cache_requests`)
    cache_dir("task_index") <cache_home>/task_index  lm-eval catalogue index

Files written into place (results, caches) get the mode a plain `open()` gives, 0o666 less
`current_umask()`.

Each kind may also have its own environment variable (`JAXEVAL_COMPILATION_CACHE`,
`JAXEVAL_CACHE_PATH`, `JAXEVAL_INDEX_CACHE`), which its module passes as `env`.
"""

from __future__ import annotations

import os
from pathlib import Path


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
