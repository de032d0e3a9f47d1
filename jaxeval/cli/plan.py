"""`jaxeval plan`: what a run would need, before it runs, from a model's config.json alone.

    jaxeval plan --model_args pretrained=DIR --mesh fsdp --devices 8 --device_memory 16
        memory per device: parameters, scoring activations, the generation KV cache
        (`jaxeval.plan.memory.print_memory_plan`)
    jaxeval plan --model_args pretrained=DIR --topology v5e-8 --lengths 2048,8192
        every executable of a run compiled for a TPU slice on this host, with the compiler's
        memory and cost figures; exit 1 if one does not compile or fit
        (`jaxeval.plan.compiled.print_topology_plan`)
    jaxeval plan --model_args pretrained=DIR,tokenizer=TOK --topology v5e-8 --tasks arc_easy,gsm8k
        a run of those tasks: the requests and executables the run would have, each executable
        compiled once for the slice, device and host seconds per task
        (`jaxeval.plan.tasks.print_tasks_plan`)

One parser and one help serve both: `--model_args`, `--mesh`, `--token_budget`, `--gen_batch_size`
and `--json` are shared; the memory plan's own flags (`MEMORY_ONLY`) are refused with `--topology`,
and the slice's own (`TOPOLOGY_ONLY`, set to anything but their defaults) without it: exit 2 with
argparse's usage message. `--tasks` takes `--model_args` as the run does (every model argument)
and refuses the flags the tasks set (`NOT_WITH_TASKS`).
"""

from __future__ import annotations

import argparse

from jaxeval.cli.base import Subcommand
from jaxeval.errors import JaxevalError

# the flags of one plan only, refused with the other (set to anything but their defaults)
MEMORY_ONLY = ("devices", "device_memory")
TOPOLOGY_ONLY = (
    "tasks",
    "data_dir",
    "limit",
    "num_fewshot",
    "attention",
    "lengths",
    "gen_slots",
    "max_gen_toks",
    "no_generation",
    "no_layer_costs",
)
# the flags --tasks sets from the tasks and the model's arguments, as the run does
NOT_WITH_TASKS = ("lengths", "gen_slots", "max_gen_toks", "no_generation", "gen_batch_size")

DESCRIPTION = """\
What a run would need, before it runs, from a model's config.json alone (no
weights read): memory per device for a model on a mesh, or, with --topology,
every executable of a run compiled for a TPU slice on this host (the compiler's
memory and cost figures; exit 1 if one does not compile or fit)."""

EPILOG = """\
examples:
  jaxeval plan --model_args pretrained=DIR --devices 8 --device_memory 16
  jaxeval plan --model_args pretrained=DIR,dtype=bfloat16 --topology v5e-8 \\
      --lengths 2048,8192
  jaxeval plan --model_args pretrained=DIR,tokenizer=TOK --topology v5e-8 \\
      --tasks arc_easy,gsm8k --data_dir DATA --limit 100

docs/tpu.md and docs/gpu.md explain the tables."""


def _lengths(text: str | None) -> list[int] | None:
    """`--lengths 2048,8192` -> [2048, 8192]; None when not given."""
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise JaxevalError(
            f"cannot parse --lengths {text!r}", hint="give lengths like 2048,8192"
        ) from None


class PlanCommand(Subcommand):
    name = "plan"
    description = DESCRIPTION
    epilog = EPILOG
    formatter_class = argparse.RawDescriptionHelpFormatter

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        a = parser.add_argument
        a(
            "--model_args",
            required=True,
            help="pretrained=DIR[,dtype=D,max_length=N] (config.json only)",
        )
        a("--mesh", default="fsdp", help="a preset of configs/meshes.yaml (default: %(default)s)")
        a("--token_budget", type=int, default=None, help="tokens per scoring batch")
        a(
            "--gen_batch_size",
            type=int,
            default=None,
            help="generation rows per batch (default: 64; with --topology, as many of 64 as fit "
            "the HBM left, the run's rule)",
        )
        a("--json", action="store_true", help="print the plan as JSON")
        memory = parser.add_argument_group("memory per device (without --topology)")
        memory.add_argument(
            "--devices", type=int, default=None, help="devices in the mesh (default: here)"
        )
        memory.add_argument(
            "--device_memory", type=float, default=None, help="GiB per device, to check fit"
        )
        tpu = parser.add_argument_group(
            "TPU slice (--topology)", 'compiled by libtpu on this host: pip install "jaxeval[tpu]"'
        )
        t = tpu.add_argument
        t("--topology", default=None, help="a TPU slice: v5e-8, v4-8, v5p-8, v6e-8, ...")
        t(
            "--tasks",
            default=None,
            help="plan a run of these tasks (comma-separated): their requests, the executables "
            "the run compiles, device and host seconds per task; --model_args as the run takes "
            "them (tokenizer=DIR for a directory without one)",
        )
        t("--data_dir", default=None, help="with --tasks: local task data, as the run's")
        t("--limit", type=float, default=None, help="with --tasks: documents per task")
        t("--num_fewshot", type=int, default=None, help="with --tasks: few-shot examples")
        t("--attention", default=None, help="attention backend (default: auto)")
        t("--lengths", default=None, help="scoring row lengths, e.g. 2048,8192")
        t(
            "--gen_slots",
            type=int,
            default=4096,
            help="KV-cache slots per row (default: %(default)s)",
        )
        t("--max_gen_toks", type=int, default=256, help="new tokens per row (default: %(default)s)")
        t("--no_generation", action="store_true", help="scoring executables only")
        t(
            "--no_layer_costs",
            action="store_true",
            help="report the compiler's FLOPs and bytes as they are (a scanned layer counted once) "
            "instead of extrapolating them from two- and three-layer compiles (about half the time)",
        )

    def parse_args(self, argv: list[str]) -> argparse.Namespace:
        parser = self.parser()
        args = parser.parse_args(argv)
        own, why = (
            (TOPOLOGY_ONLY, "only with --topology NAME")
            if args.topology is None
            else (MEMORY_ONLY, "not with --topology (the slice sets them)")
        )
        misplaced = [f"--{d}" for d in own if getattr(args, d) != parser.get_default(d)]
        if misplaced:
            parser.error(f"{', '.join(misplaced)}: {why}")
        if args.tasks is not None:
            given = [f"--{d}" for d in NOT_WITH_TASKS if getattr(args, d) != parser.get_default(d)]
            if given:
                parser.error(
                    f"{', '.join(given)}: not with --tasks (the tasks and --model_args set "
                    "them, as for the run: gen_batch_size=N in --model_args)"
                )
        return args

    def execute(self, args: argparse.Namespace) -> int:
        if args.topology is None:
            # start-up: JAX and the model families load only when planning
            from jaxeval.plan.memory import DEFAULT_GEN_ROWS, plan_model_args, print_memory_plan

            return print_memory_plan(
                plan_model_args(args.model_args),
                preset=args.mesh,
                devices=args.devices,
                token_budget=args.token_budget,
                gen_rows=args.gen_batch_size or DEFAULT_GEN_ROWS,
                device_memory=args.device_memory,
                as_json=args.json,
            )
        if args.tasks is not None:
            # start-up: the tasks, JAX and the TPU compiler load only when planning
            from jaxeval.plan.tasks import print_tasks_plan

            limit = args.limit
            return print_tasks_plan(
                args.model_args,
                args.topology,
                [t.strip() for t in args.tasks.split(",") if t.strip()],
                preset=args.mesh,
                token_budget=args.token_budget,
                count_layers=not args.no_layer_costs,
                as_json=args.json,
                data_dir=args.data_dir,
                limit=int(limit) if limit is not None and limit >= 1 else limit,
                num_fewshot=args.num_fewshot,
            )
        # start-up: JAX, the TPU compiler and the run's executables load only when planning
        from jaxeval.plan.compiled import print_topology_plan
        from jaxeval.plan.memory import plan_model_args

        model_args = plan_model_args(args.model_args)
        return print_topology_plan(
            model_args,
            args.topology,
            preset=args.mesh,
            attention=args.attention,
            lengths=_lengths(args.lengths),
            token_budget=args.token_budget,
            gen_rows=args.gen_batch_size,
            gen_slots=args.gen_slots,
            gen_new=args.max_gen_toks,
            generation=not args.no_generation,
            count_layers=not args.no_layer_costs,
            as_json=args.json,
        )
