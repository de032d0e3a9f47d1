"""Where jaxeval keeps files between runs: one root, one folder per kind.

    cache_home()            $JAXEVAL_CACHE, else $XDG_CACHE_HOME/jaxeval, else ~/.cache/jaxeval
    cache_dir("xla")        <cache_home>/xla      compiled executables (`jaxeval.platform.compile_cache`)
    cache_dir("models")     <cache_home>/models   fetched checkpoints (`jaxeval.demo.fetch`)
    cache_dir("requests")   <cache_home>/requests built requests (`--cache_requests`)
    cache_dir("task_index") <cache_home>/task_index  lm-eval catalogue index
    cache_dir("kernels")    <cache_home>/kernels  C++ kernels built on this machine (`native_path`)
    cache_dir("startup")    <cache_home>/startup  transformers' import scan (`jaxeval.cli.startup`)
    cache_dir("plan")       <cache_home>/plan     compiled figures (`jaxeval.plan.figures`)
    cache_dir("keys")       <cache_home>/keys     the user's key that signs stored executables
                                                  (`jaxeval.lm.executable_entry.user_key`)

Results get the mode a plain `open()` gives, 0o666 less `current_umask()`. Caches are private
data, whatever the umask: each folder is made 0700 and each file 0600 (`private_dir`,
`write_private`). A cache is read back only from what this user alone could have written
(`trusted_file`, `read_private`): a folder or entry that is not a plain folder or file, belongs to
another user, or is writable by group or others is skipped with one warning, and the run goes on
without it (a cache home another user could write is never used):

    ~/.cache/jaxeval            drwx------ me     used
    ~/.cache/jaxeval            drwxrwxr-x me     made 0700 (an older jaxeval's), then used
    /shared/jaxeval             drwxrwxrwx nobody skipped: owned by uid 65534
    /shared/jaxeval             drwxrwxrwt root   skipped: owned by uid 0 (for a user, not root)
    <kind>/<entry>.json         -rw------- nobody skipped: owned by uid 65534
    <kind>/<entry>.json         prw------- me     skipped: not a regular file (never opened for long:
                                                  O_NONBLOCK, checked before it is read)

Each kind may also have its own environment variable (`JAXEVAL_COMPILATION_CACHE`,
`JAXEVAL_CACHE_PATH`, `JAXEVAL_INDEX_CACHE`), which its module passes as `env`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

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


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_warned: set[str] = set()


def _warn_once(path: Path | str, why: str) -> None:
    if str(path) not in _warned:
        _warned.add(str(path))
        log.warning("jaxeval does not use the cache path %s: %s; it goes on without it", path, why)


def untrusted_reason(st: os.stat_result, *, folder: bool) -> str | None:
    """Why a cache folder or file with this status must not be trusted (None: it may be).

    drwx------ me      None                     -rw-r--r-- me      None
    drwxrwxr-x me      "writable by group or others"
    -rw------- nobody  "owned by uid 65534, not by this user (uid 0)"
    prw------- me      "not a regular file"
    """
    if folder and not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if not folder and not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return "writable by group or others"
    return None


def _folders_to_check(path: Path) -> list[Path]:
    """`path`, and when it lies under `cache_home()`, every folder from the cache home down to it
    (another user who could write any of them could replace what lies below)."""
    home = cache_home()
    try:
        rel = path.relative_to(home)
    except ValueError:
        return [path]
    out = [home]
    for part in rel.parts:
        out.append(out[-1] / part)
    return out


def private_dir(path: Path | str, *, make: bool = True) -> Path | None:
    """`path` as a private cache folder: made (with any missing parents) mode 0700 whatever the
    umask; None, with one warning, when it cannot be made, is not a folder, belongs to another
    user or is writable by group or others (it, or a folder between the cache home and it).
    With `make=False` (a read) nothing is made: a missing folder is None, quietly.

    A folder of this user's on that path with group or other bits (made by an older jaxeval under
    umask 002) is made 0700 first: only its owner may change it, and each entry is still checked.
    """
    path = Path(path)
    missing = []
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    if missing and not make:
        return None
    try:
        for folder in reversed(missing):
            try:
                os.mkdir(folder, PRIVATE_DIR)
            except FileExistsError:
                pass  # made at the same moment by another process: checked below
            else:
                os.chmod(folder, PRIVATE_DIR)  # the umask never widens 0700, but may narrow it
        for folder in _folders_to_check(path):
            st = os.stat(folder)
            if st.st_uid == os.geteuid() and stat.S_ISDIR(st.st_mode):
                if st.st_mode & 0o077:
                    os.chmod(folder, PRIVATE_DIR)
                    st = os.stat(folder)
            why = untrusted_reason(st, folder=True)
            if why:
                _warn_once(folder, why)
                return None
    except OSError as e:
        _warn_once(path, f"it cannot be made or read ({e.strerror or e})")
        return None
    return path


def trusted_file(path: Path | str) -> bool:
    """Whether `path` is a regular file of this user's that group and others cannot write (not
    followed if a link), in a private folder (`private_dir`: no one else could have renamed it
    there). A missing file is False quietly; any other refusal warns once."""
    if private_dir(Path(path).parent, make=False) is None:
        return False
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        _warn_once(path, f"it cannot be read ({e.strerror or e})")
        return False
    why = untrusted_reason(st, folder=False)
    if why:
        _warn_once(path, why)
        return False
    return True


def read_private(path: Path | str, max_bytes: int) -> bytes | None:
    """The bytes of the cache file `path`, or None (missing: quietly; anything else: one warning)
    when it is not a trusted file (`trusted_file`) or is larger than `max_bytes`.

    Opened with O_NONBLOCK and O_NOFOLLOW, checked on the open descriptor before anything is read
    (a FIFO never blocks, a link is never followed), and read no further than `max_bytes` + 1.
    Its folder must be private too (`private_dir`), or another user could have swapped entries."""
    if private_dir(Path(path).parent, make=False) is None:
        return None
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn_once(path, f"it cannot be opened ({e.strerror or e})")
        return None
    try:
        st = os.fstat(fd)
        why = untrusted_reason(st, folder=False)
        if why is None and st.st_size > max_bytes:
            why = f"{st.st_size} bytes, over the {max_bytes} a cache entry may hold"
        if why:
            _warn_once(path, why)
            return None
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            _warn_once(path, f"it grew past the {max_bytes} bytes a cache entry may hold")
            return None
        return b"".join(chunks)
    except OSError as e:
        _warn_once(path, f"it cannot be read ({e.strerror or e})")
        return None
    finally:
        os.close(fd)


def write_private(path: Path | str, data: bytes) -> bool:
    """`data` written to a 0600 temporary file beside `path` and renamed into place (a reader
    never sees half a file); False, quietly at debug level, when the folder is not private
    (`private_dir` warned) or the write fails (a full or read-only disk: the run goes on)."""
    path = Path(path)
    if private_dir(path.parent) is None:
        return False
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), PRIVATE_FILE)
            fh.write(data)
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError as e:
        log.debug("could not write the cache file %s: %s", path, e)
        return False
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


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
    """`compiler ARGS source -o target`, written to a temporary file in the target's private
    folder (`private_dir`) and renamed into place (processes building at once are safe), mode
    0600, with the library's sha256 beside it (`digest_path`). Raises RuntimeError with the
    compiler's message when the build fails or the folder is not private."""
    if private_dir(target.parent) is None:
        raise RuntimeError(f"the kernel folder {target.parent} is not private to this user")
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=target.suffix)
    os.close(fd)
    try:
        cmd = [compiler, *args, str(source), "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()[-2000:]}")
        os.chmod(tmp, PRIVATE_FILE)  # whatever the linker left
        digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
        os.replace(tmp, target)
        if not write_private(digest_path(target), digest.encode("ascii")):
            raise RuntimeError(f"could not write {digest_path(target)}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def digest_path(library: Path) -> Path:
    """Where the sha256 of a built library is kept: `<library>.sha256`."""
    return library.with_name(f"{library.name}.sha256")


def _library_intact(library: Path) -> bool:
    """Whether `library` and its digest are trusted files (`trusted_file`) in a private folder and
    the library's bytes still hash to the digest written when it was built."""
    if private_dir(library.parent) is None:
        return False
    if not (trusted_file(library) and trusted_file(digest_path(library))):
        return False
    want = read_private(digest_path(library), 64)
    body = read_private(library, 1 << 30)
    return (
        want is not None
        and body is not None
        and hashlib.sha256(body).hexdigest() == want.decode("ascii", "replace")
    )


def load_native(library: Path, build: Callable[[Path], None], load: Callable[[Path], T]) -> T:
    """`load(library)`, built first by `build(library)` unless an intact build is there
    (`_library_intact`: this user's, in a private folder, matching the digest of its build). A
    library of another user, writable by others, truncated or rewritten is never loaded: it is
    built again. A library that still fails to load (`OSError` from the loader) is built once
    more before the error stands."""
    if not _library_intact(library):
        build(library)
    try:
        return load(library)
    except OSError as e:
        log.info("the kernel %s did not load (%s); building it again", library, e)
        build(library)
        return load(library)
