"""The in-process steps of gpu_run.py, each run in a process of its own (`gpu_run.py --step NAME`):

env        devices, versions, and the denominators: the best of `jnp.dot` matmuls (bf16 8192^2
           on a GPU, float32 1024^2 on the CPU), each timed over a chain of 10 in one program,
           and the device copy bandwidth (x + 1 over a 1 GiB array, bytes read + written)
attention  the `gpu` backend's `packed` (`jaxeval.ops.attention.gpu`: cuDNN on a GPU, XLA's
           path on the CPU) against `attention.blocked_attend` on packed rows (requests, shared contexts with
           children, padding; with and without a sliding window) at Llama-1B and -8B head
           shapes: max |difference| on every query that sees a key, both against a float32
           reference, the time of each path, and whether cuDNN's custom call is in the program
parity     SmolLM2-135M-Instruct (GGUF): lm-eval's HFLM (torch) against jaxeval's JaxLM on the
           same ARC-Easy and LAMBADA requests, float32 and bfloat16, per request
"""

from __future__ import annotations

import json
import pathlib
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]


def _best(fn, *args, repeats: int = 5) -> float:
    import jax

    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def env(cpu: bool) -> dict:
    import jax
    import jax.numpy as jnp

    out = {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.device_kind}" for d in jax.devices()],
    }
    try:
        import torch

        out["torch"] = torch.__version__
        out["torch_cuda"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            out["torch_device"] = torch.cuda.get_device_name(0)
            out["cudnn"] = torch.backends.cudnn.version()
    except ImportError as e:
        out["torch"] = f"not importable: {e}"
    n, dtype, chain = (1024, jnp.float32, 10) if cpu else (8192, jnp.bfloat16, 10)
    key = jax.random.PRNGKey(0)
    a = jax.random.normal(key, (n, n), jnp.float32).astype(dtype)
    b = (jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32) / n**0.5).astype(dtype)

    @jax.jit
    def chained(a, b):
        return jax.lax.fori_loop(0, chain, lambda _, x: jnp.dot(x, b), a)

    seconds = _best(chained, a, b) / chain
    out["matmul"] = f"{n}^2 {jnp.dtype(dtype).name}"
    out["peak_flops"] = 2 * n**3 / seconds
    size = (1 << 24) if cpu else (1 << 29)  # 64 MiB float32 / 1 GiB bfloat16
    x = jnp.ones((size,), jnp.float32 if cpu else jnp.bfloat16)
    seconds = _best(jax.jit(lambda x: x + 1), x, repeats=10)
    out["copy_bytes_per_s"] = 2 * x.nbytes / seconds
    out["copy_gib"] = x.nbytes / 2**30
    return out


def _packed_rows(rng, b: int, t: int):
    """Rows of requests (30-400 tokens) and shared contexts with 2-4 children, then padding."""
    seg, par, pos = (np.zeros((b, t), np.int32) for _ in range(3))
    for row in range(b):
        at, sid = 0, 1
        while at < t - 64:
            n = min(int(rng.integers(30, 400)), t - 64 - at)
            seg[row, at : at + n], pos[row, at : at + n] = sid, np.arange(n)
            parent, base = sid, n
            if rng.random() < 0.5:
                for _ in range(int(rng.integers(2, 5))):
                    m = min(int(rng.integers(1, 12)), t - 64 - at - n)
                    sid += 1
                    seg[row, at + n : at + n + m], par[row, at + n : at + n + m] = sid, parent
                    pos[row, at + n : at + n + m] = base + np.arange(m)
                    n += m
            at, sid = at + n, sid + 1
    return seg, par, pos


def attention(cpu: bool) -> dict:
    import jax
    import jax.numpy as jnp

    from jaxeval.models import attention as attn
    from jaxeval.ops.attention import gpu as ga

    if cpu:
        b, t, block, dtype = 2, 256, 64, jnp.float32
        shapes = {"tiny": (6, 2, 64)}
    else:
        b, t, block, dtype = 4, 2048, 512, jnp.bfloat16
        shapes = {"llama-1b": (32, 8, 64), "llama-8b": (32, 8, 128)}
    how = ga.implementation_for(None)
    rng = np.random.default_rng(0)
    seg, par, pos = _packed_rows(rng, b, t)
    read = seg != 0
    out = {"implementation": how, "rows": f"{b} x {t}", "dtype": jnp.dtype(dtype).name}
    for name, (h, g, e) in shapes.items():
        q32, k32, v32 = (
            jnp.asarray(rng.standard_normal((b, t, n, e)), jnp.float32) for n in (h, g, g)
        )
        q, k, v = (x.astype(dtype) for x in (q32, k32, v32))
        fits = ga.fits(q, k, softcap=None, init=None, platform=jax.default_backend(), v=v)
        for label, window in (("causal", None), ("window 256", jnp.int32(256))):
            row: dict = {"fits": fits}
            mask = attn.Mask(seg, par, pos, window)
            kw = {"scale": jnp.float32(e**-0.5), "softcap": None, "block": block, "init": None}
            packed = attn.GpuAttention().packed
            fused = jax.jit(lambda q, k, v, kw=kw, m=mask, f=packed: f(q, k, v, m, **kw))
            blocked = jax.jit(lambda q, k, v, kw=kw, m=mask: attn.blocked_attend(q, k, v, m, **kw))
            try:
                truth = np.asarray(blocked(q32, k32, v32), np.float32)[read]
                ref = np.asarray(blocked(q, k, v), np.float32)[read]
                got = np.asarray(fused(q, k, v), np.float32)[read]
                row["max_abs_diff_vs_reference"] = float(np.abs(got - ref).max())
                row["max_abs_err_fused_vs_f32"] = float(np.abs(got - truth).max())
                row["max_abs_err_reference_vs_f32"] = float(np.abs(ref - truth).max())
                row["fused_ms"] = 1e3 * _best(fused, q, k, v)
                row["reference_ms"] = 1e3 * _best(blocked, q, k, v)
                program = fused.lower(q, k, v).compile().as_text()
                row["cudnn_in_program"] = "cudnn" in program.lower()
            except Exception as e:  # noqa: BLE001 - reported, the next case still runs
                row["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
            out[f"{name} {label}"] = row
    return out


def _requests(data: pathlib.Path, docs: int) -> list[tuple[str, str, str]]:
    """(task, context, continuation) as the ARC-Easy and LAMBADA YAMLs build them."""
    reqs = []
    with open(data / "ai2_arc/ARC-Easy/test.jsonl", encoding="utf-8") as f:
        for _, line in zip(range(docs), f):
            r = json.loads(line)
            ctx = f"Question: {r['question']}\nAnswer:"
            reqs += [("arc_easy", ctx, " " + c) for c in r["choices"]["text"]]
    with open(data / "lambada_openai/test.jsonl", encoding="utf-8") as f:
        for _, line in zip(range(docs), f):
            words = json.loads(line)["text"].split(" ")
            reqs.append(("lambada", " ".join(words[:-1]), " " + words[-1]))
    return reqs


def parity(cpu: bool, smollm2: str | None, data: pathlib.Path, docs: int) -> dict:
    """SmolLM2 per-request log-likelihoods, lm-eval HF vs jaxeval; {"skipped": why} without it."""
    import os

    if not smollm2 or not os.path.isfile(smollm2):
        return {"skipped": "no SmolLM2 GGUF on this machine"}
    import gc

    import jax
    import torch
    from lm_eval.api.instance import Instance as LmInstance
    from lm_eval.models.huggingface import HFLM

    from jaxeval.api.instance import Instance
    from jaxeval.lm.jax_lm import JaxLM

    reqs = _requests(data, docs)
    folder, name = os.path.dirname(smollm2), os.path.basename(smollm2)
    device = "cpu" if cpu else "cuda"
    out: dict = {"model": name, "requests": len(reqs), "device": device}
    for dtype in ("float32", "bfloat16"):
        row: dict = {}
        try:
            start = time.perf_counter()
            hf = HFLM(pretrained=folder, gguf_file=name, dtype=dtype, device=device, batch_size=8)
            theirs = hf.loglikelihood(
                [LmInstance("loglikelihood", {}, (c, x), i) for i, (_, c, x) in enumerate(reqs)]
            )
            del hf
            gc.collect()
            if not cpu:
                torch.cuda.empty_cache()
            row["lm_eval_s"] = time.perf_counter() - start
            start = time.perf_counter()
            jx = JaxLM(pretrained=folder, gguf_file=name, dtype=dtype, mesh="single", batch_size=8)
            ours = jx.loglikelihood(
                [Instance("loglikelihood", {}, (c, x), i) for i, (_, c, x) in enumerate(reqs)]
            )
            del jx
            jax.clear_caches()
            row["jaxeval_s"] = time.perf_counter() - start
            for task in ("arc_easy", "lambada"):
                pairs = [(a, b) for (t, _, _), a, b in zip(reqs, theirs, ours) if t == task]
                row[task] = {
                    "requests": len(pairs),
                    "max_abs_diff": max(abs(a[0] - b[0]) for a, b in pairs),
                    "greedy_differ": sum(bool(a[1]) != bool(b[1]) for a, b in pairs),
                }
        except Exception as e:  # noqa: BLE001 - one dtype fails on its own
            row["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
        out[dtype] = row
    return out
