"""Reads back what an offline W&B run recorded: its `run-<id>.wandb` transaction log.

    run = read_offline_run(wandb_dir)        the newest offline-run-* folder under wandb_dir/wandb
    run.config["task_configs"], run.history[step]["arc_easy/acc"], run.summary["arc_easy/alias"],
    run.artifacts["results"] (type, file names), run.tables["evaluation/eval_results"] (columns, rows)

The log is the file `wandb sync` uploads: a 7-byte header (":W&B", a magic number, a version),
then records framed as in LevelDB's log format (32 KiB blocks; each record: CRC-32 of type+data,
length, type FULL/FIRST/MIDDLE/LAST, data), each record a `wandb_internal_pb2.Record` protobuf.
Table contents are not in the log: they are the `files/media/table/*.table.json` files the history
points to. `run.finish()` returns before W&B's service process has written everything (seen on a
loaded machine: an empty log), so reading first tears W&B down, which waits for that process.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    raw = path.read_bytes()
    assert raw[:4] == b":W&B", f"{path} is not a W&B transaction log"
    out: list[bytes] = []
    pending = b""
    pos = HEADER
    while pos + 7 <= len(raw):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        data = raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        assert zlib.crc32(bytes([kind]) + data) == crc, f"bad checksum at byte {pos} of {path}"
        if kind == FULL:
            out.append(data)
        elif kind == FIRST:
            pending = data
        elif kind == MIDDLE:
            pending += data
        elif kind == LAST:
            out.append(pending + data)
    return out


def _set(target: dict, item: Any) -> None:
    keys = list(item.nested_key) or [item.key]
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = json.loads(item.value_json)


@dataclasses.dataclass
class OfflineRun:
    folder: Path
    config: dict[str, Any]
    history: dict[int, dict[str, Any]]
    summary: dict[str, Any]
    artifacts: dict[str, dict[str, Any]]

    def table(self, key: str, step: int | None = None) -> dict[str, Any]:
        """A logged table's JSON file ({"columns": [...], "data": [[...], ...]})."""
        rows = [self.history[step]] if step is not None else list(self.history.values())
        for row in rows:
            if key in row:
                path = self.folder / "files" / row[key]["path"]
                return json.loads(path.read_text())
        raise KeyError(f"no table {key!r} in the history")


def read_offline_run(wandb_dir: Path) -> OfflineRun:
    import wandb
    from wandb.proto import wandb_internal_pb2 as pb

    wandb.teardown()  # waits for the service to flush the transaction log

    folders = sorted((Path(wandb_dir) / "wandb").glob("offline-run-*"))
    assert folders, f"no offline run under {wandb_dir}/wandb"
    folder = folders[-1]
    (log_file,) = folder.glob("run-*.wandb")
    config: dict[str, Any] = {}
    history: dict[int, dict[str, Any]] = {}
    summary: dict[str, Any] = {}
    artifacts: dict[str, dict[str, Any]] = {}
    for data in records(log_file):
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            for item in record.run.config.update:
                _set(config, item)
        elif kind == "config":
            for item in record.config.update:
                _set(config, item)
        elif kind == "history":
            row: dict[str, Any] = {}
            for item in record.history.item:
                _set(row, item)
            history.setdefault(int(row.get("_step", record.history.step.num)), {}).update(row)
        elif kind == "summary":
            for item in record.summary.update:
                _set(summary, item)
        elif kind == "artifact":
            art = record.artifact
            files = [c.path for c in art.manifest.contents]
            artifacts[art.name] = {"type": art.type, "files": files}
    return OfflineRun(folder, config, history, summary, artifacts)
