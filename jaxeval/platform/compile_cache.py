"""JAX's persistent compilation cache, on by default, and a count of what compiled.

    compile_cache.enable()              # the per-user directory, unless switched off
    compile_cache.enable("/scratch/x")  # another directory
    compile_cache.enable("off")         # no persistent cache

Where the cache lives, first match wins: the `setting` argument (`jaxeval run --compilation_cache`,
`JaxLM(compilation_cache=...)`), the environment variable `JAXEVAL_COMPILATION_CACHE`, a directory
already set in JAX's own config (`JAX_COMPILATION_CACHE_DIR`), then `jaxeval.paths.cache_dir("xla")`
(`~/.cache/jaxeval/xla`). `off`, `0`, `false`, `none` or an empty string switch it off.

A second run of the same model and shapes then loads every executable from disk. `CompileCounter`
tells the two apart: JAX reports every `compile()` (a cache hit included) as a backend compile
event and each hit as a cache-hit event, so compilations = compile events - hits.
"""

from __future__ import annotations

import os
import threading

import jax
from jax.experimental.compilation_cache import compilation_cache as _cc

from jaxeval.paths import OFF, cache_dir, private_dir

ENV_VAR = "JAXEVAL_COMPILATION_CACHE"

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def default_dir() -> str:
    """The per-user cache directory: `<jaxeval.paths.cache_home()>/xla` (`~/.cache/jaxeval/xla`)."""
    return str(cache_dir("xla"))


def resolve(setting: str | None = None) -> str | None:
    """The cache directory the rules above choose, or None when switched off."""
    for value in (setting, os.environ.get(ENV_VAR)):
        if value is not None:
            text = str(value).strip()
            return None if text.lower() in OFF else os.path.expanduser(text)
    current = jax.config.jax_compilation_cache_dir
    return current or default_dir()


def enable(setting: str | None = None) -> str | None:
    """Points JAX's persistent cache at `resolve(setting)` (None: off); returns the directory.

    Every executable is cached, however quick its compile (JAX's default skips those under 1 s).
    The folder is made private (`jaxeval.paths.private_dir`: 0700); one another user owns or may
    write is not used (JAX would load the executables it holds), and the cache is off instead.
    Switching directories mid-process resets JAX's cache handle so the new one takes effect.
    """
    path = resolve(setting)
    if path == (jax.config.jax_compilation_cache_dir or None):
        return path
    if path is not None and private_dir(path) is None:  # another user's, or open to others: warned
        path = None
    if path is not None:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_dir", path)
    _cc.reset_cache()
    return path


class CompileCounter:
    """Counts of backend compile events and persistent-cache hits, per compiling thread.

    counter = CompileCounter.get()
    before = counter.snapshot()           # the process's (compile events, cache hits)
    ...                                    # compile something
    compiled, hits = counter.since(before)

    before = counter.snapshot(thread=True)    # the same, counting this thread's compiles only
    compiled, hits = counter.since(before, thread=True)

    JAX reports both events on the thread that compiles, so a thread's counts are its own compiles
    even while another thread compiles at the same time (`jaxeval.lm.executables`).
    """

    _instance: CompileCounter | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.events = 0
        self.hits = 0
        self._local = threading.local()
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        jax.monitoring.register_event_listener(self._on_event)

    @classmethod
    def get(cls) -> CompileCounter:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _on_duration(self, event: str, duration: float, **kwargs) -> None:
        if event == _COMPILE_EVENT:
            with self._lock:
                self.events += 1
            self._local.events = getattr(self._local, "events", 0) + 1

    def _on_event(self, event: str, **kwargs) -> None:
        if event == _HIT_EVENT:
            with self._lock:
                self.hits += 1
            self._local.hits = getattr(self._local, "hits", 0) + 1

    def snapshot(self, *, thread: bool = False) -> tuple[int, int]:
        """(compile events, cache hits) so far: the process's, or this thread's."""
        if thread:
            return getattr(self._local, "events", 0), getattr(self._local, "hits", 0)
        return self.events, self.hits

    def since(self, before: tuple[int, int], *, thread: bool = False) -> tuple[int, int]:
        """(compilations, cache hits) since `before` (a `snapshot` with the same `thread`)."""
        events, hits = self.snapshot(thread=thread)
        hits -= before[1]
        return events - before[0] - hits, hits
