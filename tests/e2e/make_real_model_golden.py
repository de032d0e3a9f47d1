"""Writes lm-eval HF's answers for the real-model cases (see `tests/e2e/real_model.py`).

    python -m tests.e2e.make_real_model_golden --dtype float32
    python -m tests.e2e.make_real_model_golden --dtype bfloat16

Runs lm-eval 0.4.13's `hf` model with `pretrained=DIR,gguf_file=NAME` (transformers dequantizes the
GGUF file with torch) on each case, and stores per-request answers and metrics as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LMEVAL_DISABLE_MULTIPROC", "1")
os.environ.setdefault("DISABLE_MULTIPROC", "1")

import yaml  # noqa: E402

from tests.e2e.real_model import (  # noqa: E402
    CASES,
    DEMO_TASK,
    EXPECTED,
    OVERRIDES,
    VARIANTS,
    base_and_flags,
    compact_samples,
    data_files,
    golden_path,
    model_args,
    model_path,
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="float32")
    p.add_argument("--tasks", default=",".join([*CASES, *VARIANTS]))
    p.add_argument(
        "--reference64",
        action="store_true",
        help="only add float64 reference values to the float32 golden file",
    )
    p.add_argument(
        "--expected-only",
        action="store_true",
        help="only rewrite tasks/demo/expected.json from the float32 golden file",
    )
    args = p.parse_args()
    if args.expected_only:
        write_demo_expected()
        return
    if args.reference64:
        add_float64_reference()
        return

    import lm_eval
    import lm_eval.tasks
    from lm_eval.tasks import TaskManager

    path = model_path()
    if path is None:
        raise SystemExit(
            "no cached SmolLM2 GGUF: run `jaxeval demo` or jaxeval.demo.fetch.fetch_smollm2()"
        )
    out_path = golden_path(args.dtype)
    out = json.loads(out_path.read_text()) if out_path.exists() else {}
    tasks_dir = os.path.dirname(lm_eval.tasks.__file__)
    with tempfile.TemporaryDirectory() as tmp:
        for task in CASES:
            rel, _, _, _ = CASES[task]
            cfg = {
                "include": os.path.join(tasks_dir, rel),
                "task": task,
                "dataset_path": "json",
                "dataset_name": None,
                "dataset_kwargs": {"data_files": data_files(task)},
                **OVERRIDES.get(task, {}),
            }
            with open(os.path.join(tmp, f"{task}.yaml"), "w") as f:
                yaml.safe_dump(cfg, f, sort_keys=False)
        tm = TaskManager(include_path=tmp)
        for key in args.tasks.split(","):
            task, flags = base_and_flags(key)
            _, _, shots, limit = CASES[task]
            start = time.time()
            res = lm_eval.simple_evaluate(
                model="hf",
                model_args=model_args(path, args.dtype),
                tasks=[task],
                num_fewshot=shots,
                limit=limit,
                device="cpu",
                batch_size=8,
                bootstrap_iters=0,
                log_samples=True,
                task_manager=tm,
                **flags,
            )
            metrics = {
                k: v for k, v in res["results"][task].items() if "," in k and "stderr" not in k
            }
            out[key] = {
                "results": metrics,
                "samples": compact_samples(res["samples"][task]),
                "seconds": round(time.time() - start, 1),
            }
            print(key, metrics, f"{time.time() - start:.0f}s", flush=True)
            out_path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    if args.dtype == "float32":
        write_demo_expected()


def write_demo_expected() -> None:
    """The demo's reference column: lm-eval's float32 metrics under the demo task names."""
    import lm_eval

    golden = json.loads(golden_path("float32").read_text())
    expected = {
        "source": f"lm-eval {lm_eval.__version__} HF backend, SmolLM2-135M-Instruct Q4_1 GGUF, float32",
        "results": {DEMO_TASK[task]: golden[task]["results"] for task in CASES if task in golden},
    }
    EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


def add_float64_reference() -> None:
    """Adds `ref64` to every log-likelihood sample of the float32 golden file.

    The value is the same request's log-likelihood in float64 (transformers' Llama on the file's
    dequantized weights), tokenized by lm-eval's own HFLM: the truth both float32 implementations
    round away from. The parity test accepts a request outside 1e-4 (+1e-6 relative) of lm-eval's
    value only when jaxeval is no farther from this reference than lm-eval is.
    """
    from lm_eval import utils
    from lm_eval.models.huggingface import HFLM

    from tests.e2e.real_model import float64_reference, torch_loglikelihood

    path = model_path()
    folder, name = os.path.dirname(path), os.path.basename(path)
    lm = HFLM(pretrained=folder, gguf_file=name, dtype="float32", device="cpu", batch_size=1)
    model = float64_reference(path)

    def score(ctx: list[int], cont: list[int]) -> float:
        return torch_loglikelihood(model, ctx, cont, lm.max_length)

    out_path = golden_path("float32")
    golden = json.loads(out_path.read_text())
    for key, entry in golden.items():
        for sample in entry["samples"]:
            if isinstance(sample["resps"][0][0], str):
                continue  # generation: strings are compared exactly
            refs = []
            for args in sample["arguments"]:
                if len(args) == 2:  # loglikelihood (context, continuation)
                    refs.append(score(*lm._encode_pair(args[0], args[1])))
                else:  # loglikelihood_rolling: lm-eval's disjoint windows, summed
                    windows = map(
                        utils.make_disjoint_window,
                        utils.get_rolling_token_windows(
                            token_list=lm.tok_encode(args[0]),
                            prefix_token=lm.prefix_token_id,
                            max_seq_len=lm.max_length,
                            context_len=1,
                        ),
                    )
                    refs.append(sum(score(list(c), list(x)) for c, x in windows))
            sample["ref64"] = refs
        print(key, "float64 reference added", flush=True)
        out_path.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
