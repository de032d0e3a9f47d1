"""Where jaxeval's float32 drift from lm-eval comes from on the real model, CPU kernels on and off.

SmolLM2-135M-Instruct (Q4_1 GGUF), ARC-Easy 0-shot loglikelihood requests for the first N test
documents ("Question: ...\\nAnswer:" + " choice", lm-eval's `arc_easy` task), four values per
request:

    lm-eval  lm-eval 0.4.13's HF backend, float32, on the GGUF file (pretrained=DIR,gguf_file=NAME,
             device cpu, batch_size 8), run live
    f64      transformers' Llama in float64 on the same dequantized weights
             (`tests.e2e.real_model.float64_reference`), tokenized by lm-eval's HFLM
             (`_encode_pair`); the context's keys and values are computed once per document
    cpu      jaxeval float32, attention backend `cpu` (the fused C++ kernels of cpu_attention.cc)
    xla      jaxeval float32, attention backend `xla` (XLA's own loops; the kernels off)

and three checks that locate the drift:

    GGUF path  every parameter jaxeval computes with, against the same tensor in transformers'
               GGUF model (what lm-eval computes with) and in the float64 model cast to float32,
               after jaxeval's layout conversion: bit-equal or not
    kernels    cpu against xla: the packed attention kernel's summation order alone
    head       the float64 model's final hidden states (after the final norm) at every scored
               position, put through jaxeval's float32 head (`kernels.score.head_stats`, then
               `segment_sum_f32`) and through lm-eval's float32 head arithmetic (torch linear,
               log_softmax, gather, `.sum()`), against the float64 head: the head's own share

A request passes the parity rule (docs/real_model.md) when it is within 1e-4 + 1e-6 * |lm-eval| of
lm-eval, or no farther than lm-eval from f64. The lm-eval answers and the float64 values (with the
hidden states for the head check) are cached under --out, keyed by the data file's sha256, the
document count and the model file; jaxeval always runs live.

    PYTHONPATH=. python bench/real_model_drift.py --docs 200
    PYTHONPATH=. python bench/real_model_drift.py --docs 40 --data_dir tasks/demo/data

Data: `<data_dir>/ai2_arc/ARC-Easy/test.jsonl` (hub layout). Without --data_dir, the first of
tests/data, tasks/demo/data and a data folder beside the repository (../shared/data) holding
at least N rows; the script prints which file it read.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LMEVAL_DISABLE_MULTIPROC", "1")
os.environ.setdefault("DISABLE_MULTIPROC", "1")

import numpy as np  # noqa: E402

from tests.e2e.real_model import OVERRIDES, float64_reference, model_path  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
ARC = pathlib.Path("ai2_arc") / "ARC-Easy" / "test.jsonl"
DATA_DIRS = (
    REPO / "tests" / "data",
    REPO / "tasks" / "demo" / "data",
    REPO.parent / "shared" / "data",
)
TASK = "arc_easy"
BACKENDS = ("cpu", "xla")
ATOL, RTOL = 1e-4, 1e-6


def beyond(a: float, b: float) -> bool:
    """Outside the parity tolerance around lm-eval's value `b`."""
    return abs(a - b) > ATOL + RTOL * abs(b)


# ---------------------------------------------------------------- data


def data_file(data_dir: str | None, docs: int) -> pathlib.Path:
    if data_dir is not None:
        path = pathlib.Path(data_dir) / ARC
        if not path.exists():
            raise SystemExit(f"{path} does not exist")
        return path
    for folder in DATA_DIRS:
        path = folder / ARC
        if path.exists() and sum(1 for _ in path.open(encoding="utf-8")) >= docs:
            return path
    raise SystemExit(f"no ARC-Easy test file with {docs} rows in {[str(d) for d in DATA_DIRS]}")


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- lm-eval and float64


def lm_eval_hflm(model: str):
    from lm_eval.models.huggingface import HFLM

    folder, name = os.path.dirname(model), os.path.basename(model)
    return HFLM(pretrained=folder, gguf_file=name, dtype="float32", device="cpu", batch_size=8)


def run_lm_eval(hflm, data: pathlib.Path, docs: int) -> dict:
    """lm-eval's `arc_easy` on the local rows, as tests/e2e/make_real_model_golden.py runs it."""
    import lm_eval
    import lm_eval.tasks
    import yaml
    from lm_eval.tasks import TaskManager

    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {
            "include": os.path.join(os.path.dirname(lm_eval.tasks.__file__), "arc/arc_easy.yaml"),
            "task": TASK,
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {"test": str(data.resolve())}},
            **OVERRIDES[TASK],
        }
        with open(os.path.join(tmp, f"{TASK}.yaml"), "w") as f:
            yaml.safe_dump(cfg, f, sort_keys=False)
        res = lm_eval.simple_evaluate(
            model=hflm,
            tasks=[TASK],
            num_fewshot=0,
            limit=docs,
            bootstrap_iters=0,
            log_samples=True,
            task_manager=TaskManager(include_path=tmp),
        )
    return {
        "version": lm_eval.__version__,
        "metrics": metrics_of(res["results"][TASK]),
        "requests": requests_of(res["samples"][TASK]),
        "seconds": round(time.time() - start, 1),
    }


def metrics_of(results: dict) -> dict:
    return {
        k.split(",")[0]: float(v) for k, v in results.items() if k in ("acc,none", "acc_norm,none")
    }


def requests_of(samples: list) -> list[dict]:
    """One entry per request: doc, choice index, the two strings, the value and greedy flag."""
    out = []
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        for j, (arg, resp) in enumerate(zip(s["arguments"], s["resps"], strict=True)):
            arg = list(arg.args) if hasattr(arg, "args") else list(arg)
            value, greedy = resp[0]
            out.append(
                {
                    "doc": int(s["doc_id"]),
                    "choice": j,
                    "context": arg[0],
                    "continuation": arg[1],
                    "value": float(value),
                    "greedy": bool(greedy),
                }
            )
    return out


def run_float64(model64, hflm, requests: list[dict]) -> tuple[list[float], dict]:
    """Each request in float64, tokenized by lm-eval's HFLM; the context's keys and values are
    computed once per distinct context token list. Returns the values and, for the head check, the
    final-norm hidden states at every scored position with their targets."""
    import torch

    values, points, targets, owner = [], [], [], []
    weight = model64.lm_head.weight  # [V, D] float64 (tied to the embedding)
    cached: tuple[tuple[int, ...], object, torch.Tensor] | None = None
    threads = torch.get_num_threads()
    # One thread: on the shared 2-core machine, two threads wait on each other at every small op
    # (a 35-token float64 forward: 0.45 s with one thread, 1.5-3 s with two under load).
    torch.set_num_threads(1)
    with torch.no_grad():
        for i, r in enumerate(requests):
            ctx, cont = hflm._encode_pair(r["context"], r["continuation"])
            if len(ctx) + len(cont) > hflm.max_length + 1:
                raise SystemExit(f"request {i} is longer than lm-eval's window: not handled here")
            if cached is None or cached[0] != tuple(ctx):
                out = model64.model(torch.tensor([ctx]), use_cache=True)
                cached = (tuple(ctx), out.past_key_values, out.last_hidden_state[0, -1:])
            h = cached[2]  # predicts cont[0]
            if len(cont) > 1:
                past = copy.deepcopy(cached[1])
                more = model64.model(
                    torch.tensor([cont[:-1]]), past_key_values=past, use_cache=True
                )
                h = torch.cat([h, more.last_hidden_state[0]], 0)
            logp = torch.log_softmax(h @ weight.T, -1)  # float64
            values.append(float(logp[torch.arange(len(cont)), torch.tensor(cont)].sum()))
            points.append(h.numpy())
            targets += cont
            owner += [i] * len(cont)
    torch.set_num_threads(threads)
    hidden = {
        "h": np.concatenate(points).astype(np.float64),
        "targets": np.asarray(targets, np.int32),
        "owner": np.asarray(owner, np.int32),
    }
    return values, hidden


# ---------------------------------------------------------------- checks


def check_weights(loaded, states: dict[str, dict]) -> dict[str, tuple[int, int, list[str]]]:
    """jaxeval's device parameters against each named HF state dict (float32 numpy, HF names),
    converted with jaxeval's own weight map: {name: (equal tensors, tensors, differing keys)}."""
    import jax

    from jaxeval.models.families import FAMILIES
    from jaxeval.models.weights.hf import Source

    spec = loaded.spec
    sources = FAMILIES[spec.model_type].weights(spec)
    leaves = jax.tree.leaves(sources, is_leaf=lambda x: isinstance(x, Source))
    params = jax.tree.leaves(loaded.params)
    assert len(leaves) == len(params)
    out = {}
    for name, state in states.items():
        equal = total = 0
        bad = []
        for source, param in zip(leaves, params, strict=True):
            ours = np.asarray(param)
            layers = range(ours.shape[0]) if "{i}" in source.key else [None]
            for i in layers:
                key = source.key.format(i=i) if i is not None else source.key
                theirs = np.asarray(state[key], np.float32)
                if source.convert is not None:
                    theirs = source.convert(theirs)
                mine = ours[i] if i is not None else ours
                same = mine.shape == theirs.shape and np.array_equal(
                    mine.view(np.uint32), np.ascontiguousarray(theirs).view(np.uint32)
                )
                equal += same
                total += 1
                if not same:
                    bad.append(key)
        out[name] = (equal, total, bad)
    return out


def head_check(loaded, hidden: dict, n: int) -> dict[str, np.ndarray]:
    """Per request: the float64 model's final hidden states through the heads (float64, jaxeval's
    float32 kernel, lm-eval's float32 arithmetic, and lm-eval's float32 logits with a float64
    log_softmax), summed per request."""
    import jax
    import jax.numpy as jnp
    import torch

    from jaxeval.kernels.score import fast_vocab_chunk, head_stats, segment_sum_f32

    h64, targets, owner = hidden["h"], hidden["targets"], hidden["owner"]
    w32 = np.asarray(loaded.params["embed"])  # tied head [V, D], float32
    w64 = w32.astype(np.float64)
    vocab = w32.shape[0]

    out = {k: np.zeros(n) for k in ("f64", "jaxeval", "lm_eval", "lm_eval_logits")}
    # float64 head, numpy
    for start in range(0, len(h64), 256):
        logits = h64[start : start + 256] @ w64.T
        m = logits.max(-1, keepdims=True)
        lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[:, 0]
        tgt = logits[np.arange(len(logits)), targets[start : start + 256]]
        np.add.at(out["f64"], owner[start : start + 256], tgt - lse)

    # jaxeval's float32 head: the scoring kernel's head and per-request sum, on batches of points
    @jax.jit
    def jax_head(h, w, t, slot):
        stats = head_stats(
            h, w, t, finalize_logits=lambda x: x, vocab_chunk=fast_vocab_chunk(h.shape[0], vocab)
        )
        return segment_sum_f32(jnp.where(slot >= 0, stats.target_lp, 0.0), slot, 64 + 1)

    reqs = np.unique(owner)
    for start in range(0, len(reqs), 64):  # 64 requests a call, padded to 512 points
        group = reqs[start : start + 64]
        sel = np.isin(owner, group)
        k = int(sel.sum())
        pad = max(512, 1 << (k - 1).bit_length())
        h = np.zeros((pad, h64.shape[1]), np.float32)
        t = np.zeros(pad, np.int32)
        slot = np.full(pad, 64, np.int32)
        h[:k], t[:k] = h64[sel].astype(np.float32), targets[sel]
        slot[:k] = np.searchsorted(group, owner[sel])
        sums = np.asarray(jax_head(h, w32, t, slot))
        out["jaxeval"][group] = sums[: len(group)]

    # lm-eval's float32 head arithmetic: linear, log_softmax, gather, torch .sum()
    w = torch.from_numpy(w32.copy())
    with torch.no_grad():
        for i in reqs:
            sel = owner == i
            h = torch.from_numpy(h64[sel].astype(np.float32))
            logits = torch.nn.functional.linear(h, w)
            logp = torch.log_softmax(logits, -1)
            t = torch.from_numpy(targets[sel].astype(np.int64))
            out["lm_eval"][i] = float(logp[torch.arange(len(t)), t].sum())
            # its float32 logits, then log_softmax and sum in float64: the matmul's share alone
            logp = torch.log_softmax(logits.double(), -1)
            out["lm_eval_logits"][i] = float(logp[torch.arange(len(t)), t].sum())
    return out


# ---------------------------------------------------------------- jaxeval


def run_jaxeval(loaded, backend: str, data: pathlib.Path, docs: int) -> dict:
    import jaxeval
    from jaxeval.api.task_manager import TaskManager
    from jaxeval.lm.jax_lm import JaxLM

    start = time.time()
    lm = JaxLM(pretrained=loaded, dtype="float32", attention=backend)
    assert lm.loaded.runtime.attention.name == backend, lm.loaded.runtime.attention
    res = jaxeval.simple_evaluate(
        model=lm,
        tasks=[{"task": TASK, **OVERRIDES[TASK]}],
        num_fewshot=0,
        limit=docs,
        bootstrap_iters=0,
        log_samples=True,
        task_manager=TaskManager(data_files={TASK: {"test": str(data.resolve())}}),
    )
    return {
        "metrics": metrics_of(res["results"][TASK]),
        "requests": requests_of(res["samples"][TASK]),
        "seconds": round(time.time() - start, 1),
    }


# ---------------------------------------------------------------- report


def golden_ref64() -> dict[tuple[str, str], float]:
    """The recorded float64 values of the demo's ARC-Easy requests, by (context, continuation)."""
    from tests.e2e.real_model import golden_path

    path = golden_path("float32")
    if not path.exists():
        return {}
    out = {}
    for s in json.loads(path.read_text()).get(TASK, {}).get("samples", []):
        for arg, ref in zip(s["arguments"], s.get("ref64") or []):
            out[(arg[0], arg[1])] = ref
    return out


def e(x: float) -> str:
    return f"{x:.2e}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=200, help="first N ARC-Easy test documents")
    p.add_argument("--data_dir", default=None, help="folder holding ai2_arc/ARC-Easy/test.jsonl")
    p.add_argument(
        "--out",
        default=os.path.join(tempfile.gettempdir(), "jaxeval_real_model_drift"),
        help="cache folder for lm-eval's answers and the float64 values",
    )
    p.add_argument("--refresh", action="store_true", help="recompute the cached pieces")
    args = p.parse_args()
    t0 = time.time()
    timings: dict[str, float] = {}

    model = model_path()
    if model is None:
        raise SystemExit(
            "no cached SmolLM2 GGUF: run `jaxeval demo` or jaxeval.demo.fetch.fetch_smollm2()"
        )
    data = data_file(args.data_dir, args.docs)
    digest = sha256(data)
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"arc_easy_{args.docs}_{digest[:12]}_{pathlib.Path(model).stem}"
    cache_path, hidden_path = out_dir / f"{stem}.json", out_dir / f"{stem}.npz"
    print(f"data: {data} (sha256 {digest[:12]}), first {args.docs} docs", flush=True)
    print(f"model: {model}", flush=True)
    print(f"cache: {cache_path}", flush=True)

    import torch

    cache = {} if args.refresh or not cache_path.exists() else json.loads(cache_path.read_text())
    hflm = None
    if "lm_eval" not in cache or "f64" not in cache or not hidden_path.exists():
        start = time.time()
        hflm = lm_eval_hflm(model)
        timings["lm-eval HFLM load"] = time.time() - start
    if "lm_eval" not in cache:
        cache["lm_eval"] = run_lm_eval(hflm, data, args.docs)
        timings["lm-eval run"] = cache["lm_eval"]["seconds"]
        cache_path.write_text(json.dumps(cache, indent=1) + "\n")
    requests = cache["lm_eval"]["requests"]
    n = len(requests)

    start = time.time()
    model64 = float64_reference(model)
    timings["float64 model build"] = time.time() - start
    if "f64" not in cache or not hidden_path.exists():
        start = time.time()
        values, hidden = run_float64(model64, hflm, requests)
        cache["f64"] = {"values": values, "seconds": round(time.time() - start, 1)}
        timings["float64 run"] = time.time() - start
        np.savez(hidden_path, **hidden)
        cache_path.write_text(json.dumps(cache, indent=1) + "\n")
    hidden = dict(np.load(hidden_path))
    f64 = np.asarray(cache["f64"]["values"])

    # transformers' own GGUF weights (what lm-eval computes with)
    start = time.time()
    if hflm is not None:
        theirs = hflm.model
    else:
        from transformers import AutoModelForCausalLM

        theirs = AutoModelForCausalLM.from_pretrained(
            os.path.dirname(model), gguf_file=os.path.basename(model), dtype=torch.float32
        )
    state32 = {k: v.numpy() for k, v in theirs.state_dict().items()}
    state64 = {k: v.numpy() for k, v in model64.state_dict().items()}
    timings["transformers GGUF load"] = time.time() - start if hflm is None else 0.0

    from jaxeval.models import load_model
    from jaxeval.platform.mesh import make_mesh

    start = time.time()
    loaded = load_model(model, mesh=make_mesh("single"), dtype="float32")
    timings["jaxeval load"] = time.time() - start
    start = time.time()
    weights = check_weights(
        loaded,
        {"transformers GGUF float32 (lm-eval's)": state32, "float64 reference, cast": state64},
    )
    timings["weight check"] = time.time() - start
    del state32, state64, theirs, hflm, model64

    runs = {}
    for backend in BACKENDS:
        runs[backend] = run_jaxeval(loaded, backend, data, args.docs)
        timings[f"jaxeval {backend}"] = runs[backend]["seconds"]
        got = [
            (r["doc"], r["choice"], r["context"], r["continuation"])
            for r in runs[backend]["requests"]
        ]
        want = [(r["doc"], r["choice"], r["context"], r["continuation"]) for r in requests]
        if got != want:
            raise SystemExit(f"jaxeval ({backend}) built different requests from lm-eval's")

    start = time.time()
    heads = head_check(loaded, hidden, n)
    timings["head check"] = time.time() - start

    lm = np.asarray([r["value"] for r in requests])
    ours = {b: np.asarray([r["value"] for r in runs[b]["requests"]]) for b in BACKENDS}
    report(args, data, requests, lm, f64, ours, runs, cache, weights, heads, timings, t0)


def report(args, data, requests, lm, f64, ours, runs, cache, weights, heads, timings, t0):
    n = len(lm)
    tol = ATOL + RTOL * np.abs(lm)
    print(f"\nARC-Easy 0-shot, {args.docs} docs, {n} requests; |sum| up to {np.abs(f64).max():.1f}")
    print(
        f"float64 head recomputed from the stored hidden states: max diff "
        f"{e(np.abs(heads['f64'] - f64).max())} from the stored f64 values"
    )
    golden = golden_ref64()
    shared = [
        (i, golden[(r["context"], r["continuation"])])
        for i, r in enumerate(requests)
        if (r["context"], r["continuation"]) in golden
    ]
    if shared:
        d = max(abs(f64[i] - v) for i, v in shared)
        print(
            f"f64 against the golden file's ref64 (one full forward per request), "
            f"{len(shared)} shared requests: max diff {e(d)}"
        )
    print()

    print(
        "| backend | requests | max abs(jaxeval - lm-eval) | beyond 1e-4 + 1e-6 rel | of those: "
        "max abs(jaxeval - f64) | of those: max abs(lm-eval - f64) | of those: jaxeval farther "
        "from f64 | all: max abs(jaxeval - f64) / abs(lm-eval - f64) | all: jaxeval farther "
        "from f64 | acc jaxeval / lm-eval | acc_norm jaxeval / lm-eval |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    lm_m = cache["lm_eval"]["metrics"]
    for b in BACKENDS:
        a = ours[b]
        out = np.abs(a - lm) > tol
        d_ours, d_lm = np.abs(a - f64), np.abs(lm - f64)
        farther = d_ours > d_lm
        m = runs[b]["metrics"]
        name = {"cpu": "cpu (kernels on)", "xla": "xla (kernels off)"}[b]
        cells = [
            name, str(n), e(np.abs(a - lm).max()), str(int(out.sum())),
            e(d_ours[out].max()) if out.any() else "-",
            e(d_lm[out].max()) if out.any() else "-",
            str(int((out & farther).sum())) + (
                f" (by up to {e((d_ours - d_lm)[out & farther].max())})"
                if (out & farther).any() else ""
            ),
            f"{e(d_ours.max())} / {e(d_lm.max())}",
            f"{int(farther.sum())} (by up to {e((d_ours - d_lm)[farther].max())})"
            if farther.any() else "0",
            f"{m['acc']:.3f} / {lm_m['acc']:.3f}"
            + (" same" if m["acc"] == lm_m["acc"] else " DIFFER"),
            f"{m['acc_norm']:.3f} / {lm_m['acc_norm']:.3f}"
            + (" same" if m["acc_norm"] == lm_m["acc_norm"] else " DIFFER"),
        ]  # fmt: skip
        print("| " + " | ".join(cells) + " |")

    loose = {b: int((np.abs(ours[b] - lm) > ATOL + 5e-6 * np.abs(lm)).sum()) for b in BACKENDS}
    print(
        f"\nbeyond 1e-4 + 5e-6 rel (the tolerance of the issue's count): "
        f"cpu {loose['cpu']}, xla {loose['xla']}"
    )
    greedy_diff = {
        b: sum(x["greedy"] != y["greedy"] for x, y in zip(runs[b]["requests"], requests))
        for b in BACKENDS
    }
    print(
        f"greedy flags differing from lm-eval: cpu {greedy_diff['cpu']}, xla {greedy_diff['xla']}"
    )

    print("\nWhere the drift comes from:\n")
    print("| check | result |")
    print("|---|---|")
    for name, (equal, total, bad) in weights.items():
        shown = f"; differ: {', '.join(bad[:4])}" if bad else ""
        print(
            f"| GGUF path: jaxeval's parameters vs {name} | {equal}/{total} tensors "
            f"bit-equal{shown} |"
        )
    print()

    def row(name: str, diff: np.ndarray) -> None:
        a = np.abs(diff)
        print(
            f"| {name} | {e(a.max())} | {e(np.median(a))} | {diff.mean():+.2e} | "
            f"{int((a > ATOL + RTOL * np.abs(f64)).sum())} |"
        )

    print(
        "| difference, per request | max abs | median abs | mean (signed) "
        "| beyond 1e-4 + 1e-6 rel |"
    )
    print("|---|---:|---:|---:|---:|")
    row("kernels: jaxeval cpu - jaxeval xla", ours["cpu"] - ours["xla"])
    row("head alone: jaxeval f32 head - f64 head (f64 hidden states)", heads["jaxeval"] - f64)
    row("head alone: lm-eval f32 head - f64 head (f64 hidden states)", heads["lm_eval"] - f64)
    row("head alone: lm-eval f32 logits, f64 log_softmax - f64 head", heads["lm_eval_logits"] - f64)
    for b in BACKENDS:
        row(f"whole model: jaxeval {b} - f64", ours[b] - f64)
    row("whole model: lm-eval - f64", lm - f64)
    for b in BACKENDS:
        row(f"body share: jaxeval {b} - its head alone", ours[b] - heads["jaxeval"])
    row("body share: lm-eval - its head alone", lm - heads["lm_eval"])
    for b in BACKENDS:
        row(f"jaxeval {b} - lm-eval", ours[b] - lm)
    row("jaxeval head alone - lm-eval head alone", heads["jaxeval"] - heads["lm_eval"])

    out_any = np.zeros(n, bool)
    for b in BACKENDS:
        out_any |= np.abs(ours[b] - lm) > tol
    print(
        f"\nRequests beyond 1e-4 + 1e-6 rel of lm-eval on either backend ({int(out_any.sum())}):\n"
    )
    print(
        "| doc | choice | lm-eval | jaxeval cpu | jaxeval xla | f64 | lm-eval - f64 | cpu - f64 "
        "| xla - f64 | head alone: jaxeval / lm-eval - f64 |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for i in np.flatnonzero(out_any):
        r = requests[i]
        print(
            f"| {r['doc']} | {r['choice']} | {lm[i]:.6f} | {ours['cpu'][i]:.6f} | "
            f"{ours['xla'][i]:.6f} | {f64[i]:.6f} | {lm[i] - f64[i]:+.2e} | "
            f"{ours['cpu'][i] - f64[i]:+.2e} | {ours['xla'][i] - f64[i]:+.2e} | "
            f"{heads['jaxeval'][i] - f64[i]:+.1e} / {heads['lm_eval'][i] - f64[i]:+.1e} |"
        )

    print(
        "\nTimings (s): "
        + ", ".join(f"{k} {v:.0f}" for k, v in timings.items() if v)
        + f"; total {time.time() - t0:.0f}"
    )
    if "seconds" in cache.get("f64", {}):
        print(
            f"(cached pieces, when first computed: lm-eval run {cache['lm_eval']['seconds']:.0f}, "
            f"float64 run {cache['f64']['seconds']:.0f})"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
