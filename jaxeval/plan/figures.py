"""What the TPU compiler said of an executable, kept on disk: a second plan of the same shapes reads
its figures instead of compiling again.

    cache = FigureCache.open()                 # <cache home>/plan, or JAXEVAL_PLAN_CACHE; None: off
    key = cache.key(job, options)              # the lowered module, options, devices, compiler
    figures = cache.get(key)                   # a dict, or None
    cache.put(key, {"flops": 1.0, ...})

JAX's persistent compilation cache cannot serve these compiles: an executable compiled for a
topology without its devices cannot be loaded back ("PjRtCompiler must be constructed with a
Client"). So the plan keeps the small part it reads (memory and cost analysis, HLO counts, cycle
estimate, or the compiler's error) as one JSON file per key. The key is a SHA-256 of the lowered
StableHLO text (the program, its shapes and shardings), the compiler options, the devices
(kind, id, coordinates: the slice) and the compiler's version, so a change of any of them compiles
again. Lowering takes seconds where compiling Llama-3-8B's executables takes minutes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Any

import jax

from jaxeval.lm.executables import Job
from jaxeval.paths import OFF, cache_dir, read_private, write_private

ENV_VAR = "JAXEVAL_PLAN_CACHE"
VERSION = 2  # of what a file holds; a change of the figures' meaning bumps it (2: "kernels")
MAX_FIGURES_BYTES = 1 << 20  # one program's figures are a few hundred bytes


def devices_of(job: Job) -> list[tuple[Any, ...]]:
    """(kind, id, coordinates) of every device `job`'s arguments are sharded over."""
    devices = set()
    for x in jax.tree.leaves(job.args):
        sharding = getattr(x, "sharding", None)
        if sharding is not None:
            devices |= sharding.device_set
    return sorted((d.device_kind, d.id, tuple(getattr(d, "coords", ()) or ())) for d in devices)


@dataclasses.dataclass(frozen=True)
class FigureCache:
    """A folder of figures, one JSON file per `key` (module docstring)."""

    path: pathlib.Path
    compiler: str = ""  # the compiler's version, part of every key

    @classmethod
    def open(cls, setting: str | None = None, *, compiler: str = "") -> FigureCache | None:
        """The cache at `setting`, else `$JAXEVAL_PLAN_CACHE`, else `<cache home>/plan`; None when
        either says off (`off`, `0`, `false`, `none`, `no` or empty)."""
        for value in (setting, os.environ.get(ENV_VAR)):
            if value is not None:
                text = str(value).strip()
                if text.lower() in OFF:
                    return None
                return cls(pathlib.Path(text).expanduser(), compiler)
        return cls(cache_dir("plan"), compiler)

    def key(self, job: Job, options: dict | None) -> str:
        text = job.lower().as_text()
        parts = [VERSION, self.compiler, sorted((options or {}).items()), devices_of(job), text]
        return hashlib.sha256(repr(parts).encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        raw = read_private(self.path / f"{key}.json", MAX_FIGURES_BYTES)
        try:
            figures = json.loads(raw) if raw is not None else None
        except ValueError:  # damaged: compile again
            return None
        return figures if isinstance(figures, dict) else None

    def put(self, key: str, figures: dict[str, Any]) -> None:
        # 0600 in a 0700 folder, renamed into place: a reader sees all of it or nothing
        write_private(self.path / f"{key}.json", json.dumps(figures).encode())
