"""A float32 routing near-tie on a long WikiText page: a tiny random DeepSeek-V3 (the configuration
of docs/real_model.md, "A routing near-tie") scored by rolling log-likelihood, per window and per
token, by lm-eval 0.4.13's HF backend (float32), jaxeval (float32) and a float64 reference
(`tests.helpers.deepseek_float64`: transformers' DeepSeek-V3 with its float32 casts made float64).

    PYTHONPATH=. python bench/moe_near_tie.py [--doc 8] [--seed 2] [--data_dir ../shared/data]

Prints each window's total on the three sides, every token whose routing differs from float64's,
and, at the token with the smallest float64 routing margin, the router logits, the corrected scores,
the margin against one float32 step, and each side's distance from float64.
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.helpers.deepseek_float64 import float64_deepseek_v3, token_scores  # noqa: E402
from tests.helpers.tiny_models import make_tiny_checkpoint  # noqa: E402
from tests.models.common import full_rows, logits_fn  # noqa: E402

CONFIG = dict(n_group=2, topk_group=1, q_lora_rank=48, kv_lora_rank=32, norm_topk_prob=True)


def build(out: str, data_dir: str, seed: int) -> str:
    """The checkpoint: a BPE tokenizer of 8,192 entries trained on WikiText-2's test lines, the tiny
    DeepSeek-V3 of `tests.helpers.tiny_models` with CONFIG, its router weights redrawn N(0, 1)."""
    import torch
    from safetensors.torch import load_file, save_file

    from jaxeval.demo.tiny import train_tokenizer

    lines = os.path.join(data_dir, "wikitext/wikitext-2-raw-v1/test.jsonl")
    with open(lines, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    tok = train_tokenizer(texts, os.path.join(out, "_tok"), style="llama", vocab_size=8192)
    path = make_tiny_checkpoint("deepseek_v3", out, tokenizer_dir=tok, seed=seed, **CONFIG)
    weights = os.path.join(path, "model.safetensors")
    state = load_file(weights)
    generator = torch.Generator().manual_seed(1234 + seed)
    key = "model.layers.1.mlp.gate.weight"
    state[key] = torch.randn(state[key].shape, generator=generator)
    save_file(state, weights, metadata={"format": "pt"})
    return path


def jaxeval_tokens(path: str, windows) -> list[np.ndarray]:
    """jaxeval's float32 logits of each window (one unpacked row), log-softmax in float64."""
    from jaxeval.models import load_model

    loaded = load_model(path)
    out = []
    for ctx, cont in windows:
        row = np.array([(list(ctx) + list(cont))[:-1]], np.int32)
        lg = np.asarray(logits_fn(loaded.spec, loaded.params, row, *full_rows(row)))[0]
        lg = lg[-len(cont) :].astype(np.float64)
        lg -= lg.max(-1, keepdims=True)
        out.append(lg[np.arange(len(cont)), cont] - np.log(np.exp(lg).sum(-1)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--doc", type=int, default=8, help="row of wikitext_document_level test")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument(
        "--data_dir", default=os.path.join(os.path.dirname(__file__), "../../shared/data")
    )
    args = ap.parse_args()
    from lm_eval import utils
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer

    from jaxeval.lm.jax_lm import JaxLM

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    out = tempfile.mkdtemp(prefix="moe_near_tie-")
    atexit.register(shutil.rmtree, out, True)
    path = build(out, args.data_dir, args.seed)
    pages = os.path.join(args.data_dir, "wikitext_document_level/wikitext-2-raw-v1/test.jsonl")
    with open(pages, encoding="utf-8") as f:
        doc = [json.loads(line) for line in f][args.doc]
    hf = HFLM(pretrained=path, dtype="float32", device="cpu", batch_size=8)
    ids = hf.tok_encode(wikitext_detokenizer(doc))
    windows = [
        utils.make_disjoint_window(w)
        for w in utils.get_rolling_token_windows(ids, hf.prefix_token_id, hf.max_length, 1)
    ]
    print(f"doc {args.doc}: {len(ids)} tokens, {len(windows)} windows of {hf.max_length}")
    requests = [(None, c, t) for c, t in windows]
    lm_eval = [r[0] for r in hf._loglikelihood_tokens(requests, disable_tqdm=True)]
    lm = JaxLM(pretrained=path, dtype="float32", mesh="single")
    ours, _ = lm.loglikelihood_tokens([(list(c), list(t)) for c, t in windows], disable_tqdm=True)
    model64 = float64_deepseek_v3(path)
    bias = model64.model.layers[1].mlp.gate.e_score_correction_bias.numpy()
    sides = {"f32": hf.model, "f64": model64}
    per = {
        k: [token_scores(m, np.array(list(c) + list(t))) for c, t in windows]
        for k, m in sides.items()
    }
    jax_tok = jaxeval_tokens(path, windows)
    print("window | lm-eval | jaxeval | f64 | jaxeval - lm-eval | jaxeval - f64 | lm-eval - f64")
    for w, (_, t) in enumerate(windows):
        f64 = per["f64"][w][0][-len(t) :].sum()
        print(w, lm_eval[w], float(ours[w]), f"{f64:.4f}", float(ours[w]) - lm_eval[w],
              f"{float(ours[w]) - f64:+.2e}", f"{lm_eval[w] - f64:+.2e}")  # fmt: skip
    for w, (_, t) in enumerate(windows):
        n = len(t)
        scored = slice(-n - 1, -1)  # positions whose next token is a continuation token
        e32, e64 = per["f32"][w][2][scored], per["f64"][w][2][scored]
        for k in np.nonzero((e32 != e64).any(1))[0]:
            logits = {s: per[s][w][1][scored][k] for s in per}
            lp = {s: per[s][w][0][-n:][k] for s in per}
            print(
                f"window {w} token {k} (id {t[k]}): transformers f32 experts {e32[k]}, f64 {e64[k]}"
            )
            print(f"  log-prob: transformers f32 {lp['f32']:.6f}, jaxeval {jax_tok[w][k]:.6f}, "
                  f"f64 {lp['f64']:.6f}")  # fmt: skip
            for s in ("f32", "f64"):
                choice = 1 / (1 + np.exp(-logits[s].astype(np.float64))) + bias
                print(f"  {s} router logits {np.array2string(logits[s], precision=7)}")
                print(f"  {s} corrected scores {np.array2string(choice, precision=9)}")
            step = np.spacing(np.float32(choice.max()))
            print(f"  one float32 step at the scores: {step:.3e}")
    tok = {k: np.concatenate([p[0][-len(t) :] for p, (_, t) in zip(per[k], windows)]) for k in per}
    j = np.concatenate(jax_tok)
    print(f"per token, max |transformers f32 - f64| {np.abs(tok['f32'] - tok['f64']).max():.3e}, "
          f"max |jaxeval - f64| {np.abs(j - tok['f64']).max():.3e}")  # fmt: skip


if __name__ == "__main__":
    main()
