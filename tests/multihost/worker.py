"""One process of the multi-process test: `jaxeval run` through the CLI, its results kept aside.

    python tests/multihost/worker.py '{"ckpt": DIR, "data": DIR, "out": DIR, "returned": FILE,
                                       "mesh": "data", "distributed": true, "limit": 3}'

The environment chooses the devices (XLA_FLAGS, JAX_PLATFORMS) and the process's place in the run
(JAXEVAL_COORDINATOR, JAXEVAL_NUM_PROCESSES, JAXEVAL_PROCESS_ID). What the run returned
(`evaluate_run`, which the command calls with its `RunConfig`) is written to `returned` (JSON;
null on processes that do not report); everything jaxeval itself writes goes under `out`
(results, samples, response cache; request cache via JAXEVAL_CACHE_PATH).
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    cfg = json.loads(sys.argv[1])
    import jaxeval.evaluator as evaluator
    from jaxeval import cli

    returned: dict = {}
    original = evaluator.evaluate_run

    def recording(config):
        returned["value"] = original(config)
        return returned["value"]

    evaluator.evaluate_run = recording
    out = cfg["out"]
    options = {
        "--model": "jax",
        "--model_args": f"pretrained={cfg['ckpt']},dtype=float32,mesh={cfg['mesh']}",
        "--tasks": "arc_easy,wikitext,gsm8k",
        "--data_dir": cfg["data"],
        "--limit": str(cfg["limit"]),
        "--num_fewshot": "0",
        "--gen_kwargs": "max_gen_toks=8",
        "--bootstrap_iters": "10",
        "--output_path": os.path.join(out, "results"),
        "--use_cache": os.path.join(out, "responses", "cache"),
        "--cache_requests": "true",
    }
    argv = ["run", "--log_samples", *(x for pair in options.items() for x in pair)]
    if cfg.get("distributed"):
        argv.append("--distributed")
    rc = cli.main(argv)
    with open(cfg["returned"], "w", encoding="utf-8") as fh:
        json.dump(returned.get("value"), fh, default=str)
    return rc


if __name__ == "__main__":
    sys.exit(main())
