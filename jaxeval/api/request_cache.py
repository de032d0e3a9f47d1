"""`--cache_requests`: built requests (Instances) pickled per task, like lm-eval's request cache.

    --cache_requests true     read the cache when present, else build every document and write it
    --cache_requests refresh  rebuild and overwrite
    --cache_requests delete   delete every cached file first, then behave like `true`

The file name holds what changes the requests (task, shots, rank/world size, chat template, system
prompt, tokenizer) plus a hash of the task's full config, so an edited YAML never reads stale requests.
Files live under `$JAXEVAL_CACHE_PATH` (default `~/.cache/jaxeval/requests`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

from jaxeval.paths import cache_dir

MODES = ("true", "refresh", "delete")


def requests_cache_dir() -> Path:
    return cache_dir("requests", env="JAXEVAL_CACHE_PATH")


def cache_key(
    task: Any,
    *,
    rank: int,
    world_size: int,
    apply_chat_template: bool,
    fewshot_as_multiturn: bool,
    system_instruction: str | None,
    tokenizer_name: str,
) -> str:
    config_hash = hashlib.sha256(
        json.dumps(task.dump_config(), sort_keys=True, default=str).encode()
    ).hexdigest()
    parts = [
        f"requests-{task.name}-{task.config.num_fewshot}shot-rank{rank}-world_size{world_size}"
    ]
    if apply_chat_template:
        parts.append("chat_template")
    if fewshot_as_multiturn:
        parts.append("fewshot_as_multiturn")
    if system_instruction is not None:
        parts.append(
            "system_prompt_hash" + hashlib.sha256(system_instruction.encode()).hexdigest()[:16]
        )
    parts.append(f"tokenizer{tokenizer_name}")
    name = "-".join(parts)
    if len(name) > 180:
        name = name[:120] + hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name}-{config_hash[:16]}.pickle"


def delete_all() -> None:
    folder = requests_cache_dir()
    if folder.is_dir():
        for path in folder.glob("requests-*.pickle"):
            path.unlink()


def load(key: str) -> list | None:
    path = requests_cache_dir() / key
    if not path.is_file():
        return None
    with path.open("rb") as fh:
        return pickle.load(fh)


def save(key: str, per_doc_instances: list) -> None:
    folder = requests_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{key}.tmp"
    with tmp.open("wb") as fh:
        pickle.dump(per_doc_instances, fh)
    os.replace(tmp, folder / key)
