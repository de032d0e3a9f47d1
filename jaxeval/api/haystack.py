"""The essay haystack of RULER's needle-in-a-haystack tasks, read from local files.

lm-eval's RULER tasks (`lm_eval/tasks/ruler/niah_utils.py`) build their documents themselves: they
hide needles ("One of the special magic numbers for X is: 7."), sized with the model's tokenizer
to `max_seq_lengths`, in a haystack. `niah_single_1` repeats one fixed sentence ("repeat") and the
multikey_2/3 tasks repeat needle-shaped filler ("needle"); the others (niah_single_2/3,
niah_multikey_1, niah_multivalue, niah_multiquery) ask `prepare_niah.get_haystack("essay")`,
which loads the hub dataset `baber/paul_graham_essays` and splits it into words:

    rows["text"] = ["An essay.\\n\\nIt  has words.", "Another one."]
    " ".join(rows)                 -> "An essay.\\n\\nIt  has words. Another one."
    re.sub(r"\\s+", " ", ...)       -> "An essay. It has words. Another one."
    .split(" ")                    -> ["An", "essay.", "It", "has", "words.", "Another", "one."]

jaxeval hands lm-eval's own `generate_samples` those words from a local text instead (see
`jaxeval.api.custom_dataset`), found in this order:

    --metadata haystack=PATH       PATH: a .txt file (one text), a folder of .txt files (one
                                   text each, sorted by name), or rows (.jsonl, .json, .csv,
                                   .parquet) whose `text` field (else `page`, as in WikiText's
                                   document-level rows) holds one text each
    --data_dir DIR                 DIR/paul_graham_essays/train.jsonl (the hub dataset's layout;
                                   also .json, .csv, .parquet), rows with `text`

Without either, an essay task stops with an error saying so before anything reaches the network.
The essay sentences are cut with nltk's Punkt model (`punkt_tab`), which nltk downloads; when it
is missing the task stops too, with the command that fetches it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from jaxeval.api import requirements
from jaxeval.api.data import check_local_file, find_local_files, local_format
from jaxeval.errors import JaxevalError

HAYSTACK_KEY = "haystack"  # --metadata haystack=PATH
ESSAY_DATASET = "baber/paul_graham_essays"  # what lm-eval 0.4.13's get_haystack("essay") loads
ESSAY_SPLIT = "train"
TEXT_FIELDS = ("text", "page")
_ROW_FORMATS = (".jsonl", ".json", ".csv", ".parquet")
HOW_TO_GIVE = (
    f"give the essay haystack as local text: --metadata {HAYSTACK_KEY}=PATH (a .txt file, a "
    "folder of .txt files, or .jsonl rows with a `text` or `page` field, e.g. WikiText), or "
    "--data_dir DIR holding DIR/paul_graham_essays/train.jsonl (rows with `text`)"
)


def find_haystack(metadata: Mapping[str, Any], data_dir: str | None, *, task: str) -> str | None:
    """The local haystack's path: `metadata["haystack"]`, else the hub layout under `data_dir`,
    else None. A named path that does not exist is an error."""
    given = metadata.get(HAYSTACK_KEY)
    if given is not None:
        path = os.path.expanduser(str(given))
        if not os.path.exists(path):
            raise JaxevalError(
                f"the haystack {path} does not exist",
                task=task,
                field=f"metadata.{HAYSTACK_KEY}",
                hint=HOW_TO_GIVE,
            )
        return path
    if data_dir is None:
        return None
    found = find_local_files(
        data_dir, dataset_path=ESSAY_DATASET, dataset_name=None, splits=[ESSAY_SPLIT]
    )
    return found[ESSAY_SPLIT] if found else None


def read_haystack_texts(path: str, *, task: str) -> list[str]:
    """The texts of a local haystack (module docstring), in order; never empty."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.lower().endswith(".txt"))
        texts = [_read_text(os.path.join(path, n), task=task) for n in names]
    elif path.lower().endswith(".txt"):
        texts = [_read_text(path, task=task)]
    elif path.lower().endswith(_ROW_FORMATS):
        texts = _read_rows(path, task=task)
    else:
        raise JaxevalError(
            f"cannot read the haystack {path}: expected a .txt file, a folder of .txt files, or "
            f"rows ({', '.join(_ROW_FORMATS)})",
            task=task,
            field=f"metadata.{HAYSTACK_KEY}",
            hint=HOW_TO_GIVE,
        )
    if not "".join(texts).strip():
        raise JaxevalError(
            f"the haystack {path} holds no text",
            task=task,
            field=f"metadata.{HAYSTACK_KEY}",
            hint=HOW_TO_GIVE,
        )
    return texts


def _read_text(path: str, *, task: str) -> str:
    check_local_file(path, task=task)
    with open(path, encoding="utf-8") as f:
        return f.read()


def _read_rows(path: str, *, task: str) -> list[str]:
    check_local_file(path, task=task)
    if path.lower().endswith((".jsonl", ".json")):
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        try:
            rows = json.loads(raw) if raw.lstrip().startswith("[") else None
        except json.JSONDecodeError:
            rows = None
        if rows is None:
            rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
    else:
        import datasets

        rows = list(datasets.load_dataset(local_format(path), data_files=path, split="train"))
    texts = []
    for i, row in enumerate(rows):
        field = next((k for k in TEXT_FIELDS if isinstance(row, dict) and k in row), None)
        if field is None:
            raise JaxevalError(
                f"row {i} of the haystack has no {' or '.join(repr(k) for k in TEXT_FIELDS)} field",
                task=task,
                file=path,
                hint="each row needs the text in a `text` (or `page`) field",
            )
        texts.append(str(row[field] or ""))
    return texts


def essay_words(texts: list[str]) -> list[str]:
    """lm-eval's essay haystack from `texts` (`prepare_niah.get_haystack("essay")`'s last lines)."""
    return re.sub(r"\s+", " ", " ".join(texts)).split(" ")


def local_get_haystack(
    original: Callable[..., Any], *, task: str, path: str | None
) -> Callable[..., Any]:
    """A stand-in for `prepare_niah.get_haystack`: the essay haystack from `path` (an error when
    there is none, or when nltk's punkt_tab is missing), every other kind from `original`."""

    def get_haystack(type_haystack: str) -> Any:
        if type_haystack != "essay":
            return original(type_haystack=type_haystack)
        if path is None:
            raise JaxevalError(
                f"this RULER task hides its needles in the essay haystack, which lm-eval loads "
                f"from the hub dataset {ESSAY_DATASET}; no local haystack was given",
                task=task,
                field=f"metadata.{HAYSTACK_KEY}",
                hint=HOW_TO_GIVE,
            )
        if not requirements.has_nltk_resource(requirements.PUNKT_RESOURCE):
            raise JaxevalError(
                f"the essay haystack is cut into sentences with nltk's Punkt model, and nltk's "
                f"'punkt_tab' data ({requirements.PUNKT_RESOURCE}) is not installed; nltk would download it "
                "from raw.githubusercontent.com",
                task=task,
                hint=f"where there is network, run `{requirements.FETCH_PUNKT}` and copy ~/nltk_data to this "
                "machine (or set NLTK_DATA to the folder holding tokenizers/punkt_tab)",
            )
        return essay_words(read_haystack_texts(path, task=task))

    return get_haystack
