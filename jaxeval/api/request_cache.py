"""`--cache_requests`: built requests (Instances) kept per task as JSON, like lm-eval's request cache.

    --cache_requests true     read the cache when present, else build every document and write it
    --cache_requests refresh  rebuild and overwrite
    --cache_requests delete   delete every cached file first, then behave like `true`

The file name holds what changes the requests (task, shots, rank/world size, chat template, system
prompt, tokenizer) plus a hash of the task's full config, so an edited YAML never reads stale requests.
Files live under `$JAXEVAL_CACHE_PATH` (default `~/.cache/jaxeval/requests`), a private folder
(`jaxeval.paths.private_dir`), each file 0600.

A file is data, never code (lm-eval pickles; a pickle someone else wrote would run their code):
JSON holding each document once and each request as its fields, with tuples and dicts tagged so
that what is read back equals what was built, type for type:

    {"format": "jaxeval-requests-1",
     "docs": [{"d": [["question", "2+2?"], ["choices", ["3", "4"]]]}],
     "groups": [[["loglikelihood", 0, {"t": ["Q: 2+2?", " 3"]}, 0, {"t": ["arc", 0, 1]}], ...]]}

    "x", 1, 2.5, true, null, [..]   as they are      {"t": [..]}  a tuple      {"d": [[k, v], ..]}  a dict

A document holding anything else (bytes, an image, a NumPy scalar) is not cached (built every run).
A file that is not this user's own (`jaxeval.paths.read_private`), is damaged, or is not of this
format is one warning and built again; an older jaxeval's `.pickle` files are never read.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from jaxeval.api.instance import Instance
from jaxeval.paths import cache_dir, read_private, write_private

log = logging.getLogger(__name__)
FORMAT = "jaxeval-requests-1"
MAX_BYTES = 1 << 31  # a cache file larger than this is not read (built again)
_SCALARS = (str, int, float, bool, type(None))

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
    return f"{name}-{config_hash[:16]}.json"


def delete_all() -> None:
    """Deletes every cached file (and an older jaxeval's `.pickle` files, unread)."""
    folder = requests_cache_dir()
    if folder.is_dir():
        for pattern in ("requests-*.json", "requests-*.pickle"):
            for path in folder.glob(pattern):
                path.unlink(missing_ok=True)


class _Unstorable(TypeError):
    """A value the JSON form cannot give back exactly."""


def encode_value(value: Any) -> Any:
    """`value` in the tagged JSON form (the module docstring); raises `_Unstorable` for any other
    type (exact types only: a subclass of str or float might not come back as itself)."""
    if type(value) in _SCALARS:
        return value
    if type(value) is list:
        return [encode_value(v) for v in value]
    if type(value) is tuple:
        return {"t": [encode_value(v) for v in value]}
    if type(value) is dict:
        return {"d": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    raise _Unstorable(f"a {type(value).__name__} cannot be kept as JSON")


def decode_value(data: Any) -> Any:
    """The inverse of `encode_value`; raises ValueError on anything it could not have written."""
    if type(data) in _SCALARS:
        return data
    if type(data) is list:
        return [decode_value(v) for v in data]
    if type(data) is dict and len(data) == 1:
        if type(data.get("t")) is list:
            return tuple(decode_value(v) for v in data["t"])
        if type(data.get("d")) is list:
            return {_key(decode_value(k)): decode_value(v) for k, v in map(_pair, data["d"])}
    raise ValueError(f"not a value this cache writes: {str(data)[:60]}")


def _pair(item: Any) -> tuple[Any, Any]:
    if type(item) is not list or len(item) != 2:
        raise ValueError("a dict item is not a [key, value] pair")
    return item[0], item[1]


def _key(key: Any) -> Any:
    if isinstance(key, (list, dict)):
        raise ValueError("a dict key is not hashable")
    return key


def encode_requests(per_doc: list[list[Instance]]) -> dict:
    """The file's JSON object: each document once (shared by its requests, as built), then each
    request's fields. Raises `_Unstorable` when a document or argument is of another type."""
    docs: list[Any] = []
    seen: dict[int, int] = {}
    groups = []
    for group in per_doc:
        rows = []
        for inst in group:
            if id(inst.doc) not in seen:
                seen[id(inst.doc)] = len(docs)
                docs.append(encode_value(inst.doc))
            rows.append([
                inst.request_type, seen[id(inst.doc)], encode_value(inst.arguments), inst.idx,
                encode_value(tuple(inst.metadata)),
            ])  # fmt: skip
        groups.append(rows)
    return {"format": FORMAT, "docs": docs, "groups": groups}


def decode_requests(data: Any) -> list[list[Instance]]:
    """The requests `encode_requests` wrote; ValueError (or TypeError) on any other shape."""
    if type(data) is not dict or data.get("format") != FORMAT:
        raise ValueError("not a jaxeval request cache of this version")
    docs = [decode_value(d) for d in data["docs"]]
    out = []
    for rows in data["groups"]:
        group = []
        for request_type, doc, arguments, idx, metadata in rows:
            if type(doc) is not int or not 0 <= doc < len(docs) or type(idx) is not int:
                raise ValueError("a request's document or index is not one this file holds")
            meta = decode_value(metadata)
            if type(meta) is not tuple or len(meta) != 3:
                raise ValueError("a request's metadata is not (task, doc_id, repeats)")
            group.append(Instance(request_type, docs[doc], decode_value(arguments), idx, meta))
        out.append(group)
    return out


def load(key: str) -> list | None:
    """The requests cached under `key`, or None (not cached, not this user's own file, damaged:
    one warning; the caller builds them again)."""
    path = requests_cache_dir() / key
    raw = read_private(path, MAX_BYTES)
    if raw is None:
        return None
    try:
        return decode_requests(json.loads(raw))
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as e:
        log.warning("the request cache %s is damaged (%s); building its requests again", path, e)
        return None


def save(key: str, per_doc_instances: list) -> None:
    """Writes the requests under `key` (0600, renamed into place); a document of a type JSON
    cannot give back, or a failed write, leaves them uncached (a debug line)."""
    try:
        text = json.dumps(encode_requests(per_doc_instances))
    except (_Unstorable, ValueError, RecursionError) as e:
        log.debug("requests not cached under %s: %s", key, e)
        return
    write_private(requests_cache_dir() / key, text.encode("utf-8"))
