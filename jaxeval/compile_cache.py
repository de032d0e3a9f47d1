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

from jaxeval.paths import cache_dir

ENV_VAR = "JAXEVAL_COMPILATION_CACHE"
OFF = frozenset({"", "0", "off", "false", "none", "no"})

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
    Switching directories mid-process resets JAX's cache handle so the new one takes effect.
    """
    path = resolve(setting)
    if path == (jax.config.jax_compilation_cache_dir or None):
        return path
    if path is not None:
        os.makedirs(path, exist_ok=True)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_dir", path)
    _cc.reset_cache()
    return path


class CompileCounter:
    """Process-wide counts of backend compile events and persistent-cache hits.

    counter = CompileCounter.get()
    before = counter.snapshot()           # (compile events, cache hits)
    ...                                    # compile something
    compiled, hits = counter.since(before)
    """

    _instance: CompileCounter | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.events = 0
        self.hits = 0
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
            self.events += 1

    def _on_event(self, event: str, **kwargs) -> None:
        if event == _HIT_EVENT:
            self.hits += 1

    def snapshot(self) -> tuple[int, int]:
        return self.events, self.hits

    def since(self, before: tuple[int, int]) -> tuple[int, int]:
        """(compilations, cache hits) since `before`."""
        hits = self.hits - before[1]
        return self.events - before[0] - hits, hits
