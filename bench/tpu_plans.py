"""Regenerates the tables of docs/tpu.md by running `jaxeval plan --topology` (never typed by hand).

    python bench/tpu_plans.py                 # every table (over an hour on a 2-core CPU host)
    python bench/tpu_plans.py --only smollm2  # the tables whose name starts with "smollm2"
    python bench/tpu_plans.py --check         # exit 1 if docs/tpu.md lacks a table's block

Each table sits between `<!-- plan:NAME:start -->` and `<!-- plan:NAME:end -->` in docs/tpu.md,
under the exact command that printed it. Needs libtpu (`pip install "jaxeval[tpu]"`).
"""

from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "tpu.md"


# name -> (model directory, topology, extra arguments). The v5e-8 pairs count every layer's FLOPs
# and bytes (`layer_costs`: three compiles per executable); the others report memory, collectives
# and kernels (`--no_layer_costs`), which is what a larger slice changes.
LENGTHS = ["--lengths", "2048,8192"]
QUICK = ["--lengths", "2048", "--no_layer_costs"]
GEN_32K = ["--gen_slots", "32768", "--max_gen_toks", "128"]
LONG = ["--lengths", "32768,131072", *GEN_32K]
TABLES = {
    "smollm2-v5e-8": ("configs/models/smollm2-135m", "v5e-8", LENGTHS),
    "smollm2-v5e-8-xla": ("configs/models/smollm2-135m", "v5e-8", [*LENGTHS, "--attention", "xla"]),
    "llama-3-8b-v5e-8": ("configs/models/llama-3-8b", "v5e-8", LENGTHS),
    "llama-3-8b-v5e-8-xla": (
        "configs/models/llama-3-8b",
        "v5e-8",
        [*LENGTHS, "--attention", "xla"],
    ),
    "llama-3-8b-v4-8": ("configs/models/llama-3-8b", "v4-8", QUICK),
    "llama-3-8b-v5e-16": ("configs/models/llama-3-8b", "v5e-16", QUICK),
    "llama-3-70b-v5e-32": ("configs/models/llama-3-70b", "v5e-32", QUICK),
    "mixtral-8x7b-v5e-8": ("configs/models/mixtral-8x7b", "v5e-8", ["--lengths", "2048"]),
    "qwen3-30b-a3b-v5e-8": ("configs/models/qwen3-30b-a3b", "v5e-8", ["--lengths", "2048"]),
    "qwen2.5-14b-instruct-v5e-4": (
        "configs/models/qwen2.5-14b-instruct",
        "v5e-4",
        ["--lengths", "2048,32768", "--no_layer_costs"],
    ),
    # long context: one long row splits its tokens over the chips (`models.attention.sequence`)
    "llama-3.1-8b-v5e-8-long": ("configs/models/llama-3.1-8b", "v5e-8", LONG),
    "llama-3.1-8b-v6e-8-long": ("configs/models/llama-3.1-8b", "v6e-8", LONG),
    # one 131,072-token prompt's prefill and decode: the engine's slots split over the chips
    # (`models.attention.slots`)
    "llama-3.1-8b-v5e-8-128k": (
        "configs/models/llama-3.1-8b",
        "v5e-8",
        ["--lengths", "131072", "--gen_slots", "131072", "--max_gen_toks", "128"],
    ),
    "llama-3.1-8b-v6e-8-128k": (
        "configs/models/llama-3.1-8b",
        "v6e-8",
        ["--lengths", "131072", "--gen_slots", "131072", "--max_gen_toks", "128"],
    ),
    "qwen2.5-7b-instruct-v5e-4-long": (
        "configs/models/qwen2.5-7b-instruct",
        "v5e-4",
        ["--lengths", "32768", *GEN_32K],
    ),
}


def command(model: str, topology: str, extra: list[str]) -> list[str]:
    return [
        "jaxeval",
        "plan",
        "--topology",
        topology,
        "--model_args",
        f"pretrained={model}",
        *extra,
    ]


def run(name: str) -> str:
    model, topology, extra = TABLES[name]
    argv = command(model, topology, extra)
    shown = " ".join(argv)
    done = subprocess.run(
        [sys.executable, "-m", "jaxeval", *argv[1:]], cwd=REPO, capture_output=True, text=True
    )
    table = done.stdout.strip()
    if done.returncode not in (0, 1) or not table:
        raise SystemExit(f"{name}: {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return f"```\n{shown}\n```\n\n{table}\n"


def replace_block(text: str, name: str, body: str) -> str:
    pattern = re.compile(
        rf"(<!-- plan:{re.escape(name)}:start -->\n).*?(<!-- plan:{re.escape(name)}:end -->)", re.S
    )
    if not pattern.search(text):
        raise SystemExit(f"docs/tpu.md has no block for {name}")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="regenerate the tables whose name starts with this")
    p.add_argument("--check", action="store_true", help="check that every block exists")
    args = p.parse_args()
    text = DOC.read_text()
    if args.check:
        missing = [n for n in TABLES if f"<!-- plan:{n}:start -->" not in text]
        print("missing:", missing) if missing else print("ok")
        return 1 if missing else 0
    for name in TABLES:
        if name.startswith(args.only):
            print(f"{name} ...", flush=True)
            body = run(name)  # minutes: the page may be edited meanwhile, so read it again
            DOC.write_text(replace_block(DOC.read_text(), name, body))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
