"""Copies the first N rows of each benchmark file the tests read into `tests/data/`, hub layout.

The tests never read outside the repository: `tests/data/` holds only the rows they need, each file
the first N lines of the offline sample it came from (the `../shared/data` tree, itself the first
rows of each Hugging Face dataset), so `--data_dir tests/data` finds them as it would the hub:

    python -m tests.helpers.copy_rows ../shared/data        # rewrites tests/data/<file> for ROWS
    tests/data/ai2_arc/ARC-Easy/test.jsonl                   # = first 50 lines of the source

`tests/data/MANIFEST.json` records rows, bytes and sha256 of every file written. A test that needs
more rows raises its count here and reruns the script (keep the whole tree a few hundred KiB).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"

# file (hub layout, relative to the data root) -> rows kept; what needs them, in the comment.
ROWS = {
    "ai2_arc/ARC-Easy/test.jsonl": 50,  # CLI runs, engine parity (limit 40), e2e, multihost
    "ai2_arc/ARC-Easy/validation.jsonl": 30,  # few-shot pool, JaxLM workloads (6)
    "ai2_arc/ARC-Challenge/test.jsonl": 20,  # catalogue parity (arc_challenge_chat/_llama, limit 6)
    "ai2_arc/ARC-Challenge/validation.jsonl": 10,  # their few-shot pool
    "boolq/validation.jsonl": 40,  # task parity (limit 20, 5-shot pool)
    "drop/validation.jsonl": 100,  # DROP metric and task parity on every stored doc (21 passages)
    "gsm8k/test.jsonl": 30,  # engine parity (limit 12), chain-of-thought golds (first 20)
    "gsm8k/train.jsonl": 30,  # few-shot pool
    "hellaswag/validation.jsonl": 40,  # task parity (limit 20, 5-shot), helpers, workloads
    "lambada_openai/test.jsonl": 50,  # engine parity (limit 40), workloads (8)
    "mmlu/abstract_algebra/dev.jsonl": 5,
    "mmlu/abstract_algebra/test.jsonl": 30,  # group parity (limit 25)
    "mmlu/anatomy/dev.jsonl": 5,
    "mmlu/anatomy/test.jsonl": 40,  # engine parity (limit 30), workloads (3)
    "mmlu/astronomy/dev.jsonl": 5,
    "mmlu/astronomy/test.jsonl": 30,  # group parity (limit 25)
    # The other nine stored subjects: each catalogue MMLU variant of them (continuation, generative,
    # flan_*) against lm-eval (tests/tasks/test_catalogue_shared_data.py, limit 4, 5-shot dev pool).
    "mmlu/college_computer_science/dev.jsonl": 5,
    "mmlu/college_computer_science/test.jsonl": 5,
    "mmlu/formal_logic/dev.jsonl": 5,
    "mmlu/formal_logic/test.jsonl": 5,
    "mmlu/global_facts/dev.jsonl": 5,
    "mmlu/global_facts/test.jsonl": 5,
    "mmlu/high_school_geography/dev.jsonl": 5,
    "mmlu/high_school_geography/test.jsonl": 5,
    "mmlu/high_school_mathematics/dev.jsonl": 5,
    "mmlu/high_school_mathematics/test.jsonl": 5,
    "mmlu/high_school_us_history/dev.jsonl": 5,
    "mmlu/high_school_us_history/test.jsonl": 5,
    "mmlu/marketing/dev.jsonl": 5,
    "mmlu/marketing/test.jsonl": 5,
    "mmlu/us_foreign_policy/dev.jsonl": 5,
    "mmlu/us_foreign_policy/test.jsonl": 5,
    "mmlu/world_religions/dev.jsonl": 5,
    "mmlu/world_religions/test.jsonl": 5,
    "piqa/validation.jsonl": 40,  # task parity (limit 20, 5-shot pool)
    # RULER's essay haystack in the long-context parity test (line-level WikiText, ~2,800 words)
    "wikitext/wikitext-2-raw-v1/test.jsonl": 60,
    "wikitext_document_level/wikitext-2-raw-v1/test.jsonl": 6,  # task parity (limit 4), workloads
    "winogrande/winogrande_xl/validation.jsonl": 40,  # task parity (limit 20), helpers
}


def first_lines(path: Path, n: int) -> bytes:
    """The first `n` lines of `path`, byte for byte (each ends in a newline)."""
    out = []
    with path.open("rb") as f:
        for _, line in zip(range(n), f):
            out.append(line if line.endswith(b"\n") else line + b"\n")
    if len(out) < n:
        raise SystemExit(f"{path} has {len(out)} rows, fewer than the {n} asked for in ROWS")
    return b"".join(out)


def copy_rows(source: Path, dest: Path = DATA) -> dict[str, dict]:
    """Writes each ROWS file under `dest`; returns the manifest {file: {rows, bytes, sha256}}."""
    manifest = {}
    for rel, n in sorted(ROWS.items()):
        data = first_lines(source / rel, n)
        json.loads(data.splitlines()[0])  # fail early on a file that is not JSON Lines
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        manifest[rel] = {"rows": n, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.helpers.copy_rows <source data root>")
    written = copy_rows(Path(sys.argv[1]))
    print(f"{len(written)} files, {sum(m['bytes'] for m in written.values())} bytes -> {DATA}")
