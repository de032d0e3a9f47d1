"""A save's journal: the files it is about to write, so that the next save to the same folder can
clean up after a save that was killed half way (SIGKILL, out of memory, power loss).

    out/model/.jaxeval-save.4711.k3j9x.json
    {"host": "tpu-vm-0", "pid": 4711, "started": "88231", "files": [
        "samples_arc_easy_2025-01-01T10-00-00.5.jsonl", "results_2025-01-01T10-00-00.5.json"]}

`journal(folder, names)` writes it before the first file and removes it after the last (the results
file, renamed into place last). `sweep(folder)`, at the start of the next save, reads each journal
there whose process no longer runs (same host, and that pid gone or started at another time): if
its results file is missing, the samples files it names are orphans and are removed; every named
file's hidden temporary (`.NAME.*.tmp`, `atomic_write`) is removed; then the journal. Journals of
live processes (a concurrent run saving into the same folder) and of other hosts are left alone.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)
PREFIX = ".jaxeval-save."
UNREADABLE_AFTER_S = 60  # a journal this old that does not parse was cut short by a kill
_OPEN: set[str] = set()  # this process's journals of saves in progress


def process_started(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, Linux `/proc`); None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]  # field 22; the name before ")" may hold spaces


def is_running(path: Path, pid: int, started: str | None) -> bool:
    """Whether the save that wrote journal `path` still runs (its process, on this host)."""
    if pid == os.getpid():  # this process, or an earlier one that had the same pid
        return os.path.realpath(path) in _OPEN
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    now = process_started(pid)
    return started is None or now is None or now == started


@contextlib.contextmanager
def journal(folder: Path, names: list[str]) -> Iterator[None]:
    """Writes the journal of a save of `names` into `folder` (last name: the results file), runs
    the save, and removes the journal once it is done. A save that raises is swept at once (its
    samples files, without their results file, are removed); a killed one by the next `sweep`."""
    entry = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": process_started(os.getpid()),
        "files": names,
    }
    fd, path = tempfile.mkstemp(dir=folder, prefix=f"{PREFIX}{os.getpid()}.", suffix=".json")
    real = os.path.realpath(path)
    _OPEN.add(real)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(entry, fh)
        yield
    except BaseException:
        _OPEN.discard(real)
        with contextlib.suppress(OSError):
            _clean(folder, Path(path), names)
        raise
    else:
        os.unlink(path)
    finally:
        _OPEN.discard(real)


def sweep(folder: Path) -> list[Path]:
    """Removes what killed saves left in `folder` (module docstring); returns the removed paths.
    Never raises: a file it cannot remove stays, and the save goes on."""
    removed: list[Path] = []
    try:
        journals = sorted(folder.glob(f"{PREFIX}*.json"))
    except OSError:
        return removed
    for path in journals:
        try:
            removed += _sweep_one(folder, path)
        except OSError as e:
            log.debug("could not clean up after the killed save %s: %s", path, e)
    return removed


def _sweep_one(folder: Path, path: Path) -> list[Path]:
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        host, pid, started = entry["host"], int(entry["pid"]), entry.get("started")
        names = [str(n) for n in entry["files"]]
    except (ValueError, KeyError, TypeError):
        if time.time() - path.stat().st_mtime < UNREADABLE_AFTER_S:
            return []  # being written right now
        path.unlink()
        return [path]
    if host != socket.gethostname() or is_running(path, pid, started):
        return []
    return _clean(folder, path, names)


def _clean(folder: Path, path: Path, names: list[str]) -> list[Path]:
    """Removes what the save of journal `path` left: its samples files if its results file (the
    last name) is missing, every named file's temporary, the journal."""
    names = [os.path.basename(n) for n in names]
    stale: list[Path] = []
    if names and not (folder / names[-1]).exists():
        stale += [folder / n for n in names[:-1]]
    for name in names:
        stale += folder.glob(f".{glob.escape(name)}.*.tmp")
    removed = []
    for file in stale:
        if file.is_file():
            file.unlink()
            removed.append(file)
    path.unlink(missing_ok=True)
    if removed:
        log.warning(
            "removed %d file(s) an unfinished save left in %s: %s",
            len(removed),
            folder,
            ", ".join(p.name for p in removed),
        )
    return [*removed, path]
