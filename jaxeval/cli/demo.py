"""`jaxeval demo`: SmolLM2-135M-Instruct on the bundled demo tasks, offline after its first fetch.

    jaxeval demo                      the real model, beside lm-eval's scores on the same rows
    jaxeval demo --tiny --limit 2     a tiny random model built on the spot (chance-level scores)

The run itself is `jaxeval.demo.run.run_demo`; this module parses the flags, prints the text the
run returns and writes its results files with `--output_path`.
"""

from __future__ import annotations

import argparse
import time

from jaxeval.cli.base import Subcommand


class DemoCommand(Subcommand):
    name = "demo"
    description = (
        "A real model through the real JAX path, beside lm-eval's scores on the same rows."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--model_dir",
            default=None,
            help="where the tiny random fallback model is built (default: demo-llama in "
            "jaxeval's cache)",
        )
        parser.add_argument(
            "--tiny", action="store_true", help="skip SmolLM2; run the tiny random model"
        )
        parser.add_argument("--output_path", default=None)
        parser.add_argument(
            "--limit", type=int, default=None, help="documents per task (default: all bundled rows)"
        )
        parser.add_argument(
            "--mesh",
            default=None,
            help="a mesh preset from configs/meshes.yaml (default: data-parallel over every device)",
        )

    def execute(self, args: argparse.Namespace) -> int:
        # start-up: the demo and the evaluator load only when asked for
        from jaxeval.demo.run import run_demo
        from jaxeval.results.files import save_results

        start = time.time()
        results, text, _ = run_demo(
            model_dir=args.model_dir,
            tiny=args.tiny,
            limit=args.limit,
            mesh=args.mesh,
            log_samples=bool(args.output_path),
        )
        print(text)
        if args.output_path:
            saved = save_results(
                results,
                args.output_path,
                model_args=results["config"]["model_args"],
                model_source="jax",
                start_time=start,
            )
            print(f"Results written to {saved}")
        return 0
