"""How far float32 lets two correct implementations drift apart, by depth, on a real model.

Scores real ARC-Easy requests (context + choice, summed continuation log-likelihood, lm-eval's
quantity) and one WikiText page (rolling-style sum over every token), each as its system reports
it (jaxeval: the scoring kernel's per-request sum; transformers: lm-eval's log_softmax + gather +
`.sum()`), with SmolLM2-135M-Instruct
(Q4_1 GGUF) truncated to its first L layers, three ways:

    ours32   jaxeval, float32 (XLA CPU)
    torch32  transformers' GGUF path, float32 (exactly what the lm-eval HF oracle computes)
    torch64  transformers' Llama in float64 on the same dequantized weights (the reference)

and prints, per depth, the largest |ours32 - torch64|, |torch32 - torch64| and |ours32 - torch32|
over the requests. When ours32 and torch32 sit at the same distance from the float64 value, the gap
between them is float32 rounding (different but equally valid reduction orders), not a bug.

    python bench/precision_depth.py [--requests 40] [--page_tokens 2048]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.e2e.real_model import float64_reference, torch_loglikelihood  # noqa: E402


def _requests(n: int, tok) -> list[tuple[list[int], list[int]]]:
    from importlib import resources

    path = (
        resources.files("jaxeval.tasks") / "demo" / "data" / "ai2_arc" / "ARC-Easy" / "test.jsonl"
    )
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        ctx = tok(f"Question: {row['question']}\nAnswer:").input_ids
        for choice in row["choices"]["text"]:
            out.append((ctx, tok(" " + choice).input_ids))
        if len(out) >= n:
            break
    return out[:n]


def _page(tok, n_tokens: int) -> list[int]:
    from importlib import resources

    path = (
        resources.files("jaxeval.tasks")
        / "demo"
        / "data"
        / "wikitext_document_level"
        / "wikitext-2-raw-v1"
        / "test.jsonl"
    )
    text = json.loads(path.read_text(encoding="utf-8").splitlines()[0])["page"]
    return tok(text).input_ids[:n_tokens]


def _torch_sums(model, seqs) -> list[float]:
    """lm-eval HFLM's arithmetic (`tests.e2e.real_model.torch_loglikelihood`), per request."""
    return [torch_loglikelihood(model, list(c), list(x)) for c, x in seqs]


def _ours_sums(loaded, spec, params, tok, seqs) -> list[float]:
    """What jaxeval reports: `JaxLM.loglikelihood_tokens`, the scoring kernel's per-request sums."""
    import dataclasses as dc

    from jaxeval.lm.jax_lm import JaxLM

    lm = JaxLM(
        pretrained=dc.replace(loaded, spec=spec, params=params),
        tokenizer=tok,
        max_length=4096,
        packing=False,
    )
    ll, _ = lm.loglikelihood_tokens([(list(c), list(x)) for c, x in seqs], disable_tqdm=True)
    return [float(v) for v in ll]


def _truncate_ours(loaded, depth: int):
    import jax

    spec = loaded.spec
    spec = dataclasses.replace(
        spec,
        num_layers=depth,
        sliding_window=spec.sliding_window[:depth],
        attn_scale=spec.attn_scale[:depth],
        rope=spec.rope[:depth] if spec.rope else (),
    )
    params = dict(loaded.params)
    params["layers"] = jax.tree.map(lambda x: x[:depth], loaded.params["layers"])
    return spec, params


def _truncate_torch(model, depth: int):
    import copy

    m = copy.deepcopy(model)
    m.model.layers = m.model.layers[:depth]
    m.config.num_hidden_layers = depth
    return m


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--page_tokens", type=int, default=2048)
    p.add_argument("--depths", default="1,8,30")
    args = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from jaxeval.demo.fetch import fetch_smollm2
    from jaxeval.models import load_model

    path = fetch_smollm2()
    folder, name = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    t32 = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    t64 = float64_reference(path)
    ours = load_model(path)
    reqs = _requests(args.requests, tok)
    page = _page(tok, args.page_tokens)
    page_req = [(page[:1], page[1:])]
    print(
        f"{len(reqs)} ARC-Easy requests (sums {min(len(c) for _, c in reqs)}-"
        f"{max(len(c) for _, c in reqs)} tokens), one WikiText page of {len(page)} tokens\n"
    )
    print(
        "| layers | ARC max abs(ours32-t64) | abs(torch32-t64) | abs(ours32-torch32) | ARC |sum| max "
        "| page abs(ours32-t64) | abs(torch32-t64) | abs(ours32-torch32) | page |sum| |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for depth in [int(d) for d in args.depths.split(",")]:
        start = time.time()
        spec, params = _truncate_ours(ours, depth)
        a32, b32, b64 = (
            np.array(_ours_sums(ours, spec, params, tok, reqs + page_req)),
            np.array(_torch_sums(_truncate_torch(t32, depth), reqs + page_req)),
            np.array(_torch_sums(_truncate_torch(t64, depth), reqs + page_req)),
        )
        arc, pg = slice(0, len(reqs)), slice(len(reqs), None)
        row = [depth]
        for part in (arc, pg):
            row += [
                np.abs(a32[part] - b64[part]).max(),
                np.abs(b32[part] - b64[part]).max(),
                np.abs(a32[part] - b32[part]).max(),
                np.abs(b64[part]).max(),
            ]
        print(
            "| "
            + " | ".join(
                str(row[0]) if i == 0 else f"{v:.2e}" if i % 4 else f"{v:.1f}"
                for i, v in enumerate(row)
            )
            + f" |  ({time.time() - start:.0f}s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
