"""Shared pieces of the RULER / BABILong tests: the local haystack, the synthetic BABILong rows,
a Punkt model for nltk and a tokenizer that sizes RULER's documents.

* `HAYSTACK`: the first 60 lines of line-level WikiText-2 (`text` rows, ~2,800 words; copied by
  tests/helpers/copy_rows.py), handed to RULER's essay tasks with `--metadata haystack=PATH`.
* `BABILONG`: five synthetic `babilong_qa1` rows in the hub's schema (`input`, `question`,
  `target`) for config `4k`, laid out as `RMT-team/babilong-1k-samples` is
  (`<data_dir>/babilong-1k-samples/4k/qa1.jsonl`): bAbI-style location facts ("Mary moved to the
  office.") between WikiText sentences, ~3,100-3,500 tokens of the tiny tokenizer each.
* `punkt_tab`: nltk's Punkt sentence splitter, which RULER's essay haystack needs and nltk only
  downloads, trained here on the haystack itself and written where nltk looks (a temporary
  folder put on `nltk.data.path`). Both sides of a parity test use the same one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import TEST_DATA

HAYSTACK = TEST_DATA / "wikitext" / "wikitext-2-raw-v1" / "test.jsonl"
BABILONG = TEST_DATA / "babilong-1k-samples" / "4k" / "qa1.jsonl"
# (hub id, config, split) -> the local rows that stand in for what lm-eval asks the hub for
HUB = {
    ("baber/paul_graham_essays", None, "train"): HAYSTACK,
    ("RMT-team/babilong-1k-samples", "4k", "qa1"): BABILONG,
}
PUNKT_FILES = ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab")


def haystack_texts() -> list[str]:
    with HAYSTACK.open(encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def served_hub(original: Callable[..., Any]) -> Callable[..., Any]:
    """A stand-in for `datasets.load_dataset` (`original`) that serves HUB's entries from their
    local rows and passes every other call on."""

    def load_dataset(path: str, name: str | None = None, *args: Any, split: Any = None, **kw: Any):
        local = HUB.get((path, name, split))
        if local is None:
            return original(path, name, *args, split=split, **kw)
        return original("json", data_files={split: str(local)}, split=split)

    return load_dataset


def write_punkt_tab(root: Path, texts: list[str]) -> Path:
    """Trains Punkt on `texts` and writes `root/tokenizers/punkt_tab/english/` (nltk's layout);
    returns `root`, the folder to put on `nltk.data.path`."""
    from nltk.tokenize.punkt import PunktTrainer, TabEncoder

    trainer = PunktTrainer()
    trainer.train(" ".join(texts), finalize=True)
    params, enc = trainer.get_params(), TabEncoder()
    contents = (
        enc.tups2tab(params.collocations),
        enc.set2txt(params.sent_starters),
        enc.set2txt(params.abbrev_types),
        enc.ivdict2tab(params.ortho_context),
    )
    folder = root / "tokenizers" / "punkt_tab" / "english"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in zip(PUNKT_FILES, contents):
        (folder / name).write_text(text, encoding="utf-8")
    return root
