"""What `--wandb_args`, `--wandb_config_args` and `--hf_hub_log_args` do around one `jaxeval run`.

    loggers = RunLoggers.start(...)     before the model loads: flags parsed and checked, the W&B run
                                        started, the Hub's token checked (fails here, not after hours)
    ... evaluate, save_results ...
    loggers.finish(results, results_file, model_name)
                                        W&B: metrics, tables, artifacts, samples; then the Hub upload

A W&B logging failure is a warning (the results file is already written); a failed Hub upload is
an error that names the saved files.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.results.files import samples_path
from jaxeval.trackers.args import merge_dict_args
from jaxeval.trackers.hub import (
    HubLogArgs,
    check_hub_access,
    hub_token,
    plan_hub_upload,
    push_to_hub,
)
from jaxeval.trackers.wandb import WandbTracker

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RunLoggers:
    wandb: WandbTracker | None
    hub: HubLogArgs | None
    hub_org: str
    log_samples: bool
    model_source: str

    @classmethod
    def start(
        cls,
        *,
        wandb_args: Any,
        wandb_config_args: Any,
        hf_hub_log_args: Any,
        output_path: str | None,
        log_samples: bool,
        model_source: str,
    ) -> RunLoggers:
        init = merge_dict_args(wandb_args, "wandb_args")
        config = merge_dict_args(wandb_config_args, "wandb_config_args")
        if config and wandb_args is None:
            raise JaxevalError(
                "--wandb_config_args is used only with --wandb_args",
                field="wandb_config_args",
                hint="add --wandb_args project=NAME",
            )
        hub = None
        org = ""
        if hf_hub_log_args is not None:
            hub = HubLogArgs.from_dict(merge_dict_args(hf_hub_log_args, "hf_hub_log_args"))
            if hub.pushes and not output_path:
                raise JaxevalError(
                    "pushing to the Hub uploads the files written to --output_path",
                    field="hf_hub_log_args",
                    hint="add --output_path DIR",
                )
            if hub.push_samples_to_hub and not log_samples:
                log.warning("push_samples_to_hub needs --log_samples: only results are pushed")
            org = check_hub_access(hub)
        tracker = WandbTracker(init, config) if wandb_args is not None else None
        return cls(tracker, hub, org, log_samples, model_source)

    def finish(self, results: dict[str, Any], results_file: Path | None, model_name: str) -> None:
        """Logs to W&B, then pushes to the Hub (`results` still holds "samples" if logged)."""
        samples = results.get("samples") or {}
        if self.wandb is not None:
            try:
                self.wandb.log_results(results)
                if self.log_samples and samples:
                    self.wandb.log_samples(results, samples)
            except Exception as e:  # the results are saved; logging must not lose them
                log.warning("logging to W&B failed: %s: %s", type(e).__name__, e)
            finally:
                self.wandb.finish()
        if self.hub is None or not self.hub.pushes or results_file is None:
            return
        plan = plan_hub_upload(
            self.hub,
            org=self.hub_org,
            model_name=model_name,
            model_source=self.model_source,
            results_file=results_file,
            samples_files=[samples_path(results_file, t) for t in samples],
        )
        if not plan.commits:
            return
        try:
            push_to_hub(plan, token=hub_token(self.hub), results=results)
        except Exception as e:
            raise JaxevalError(
                f"the results were saved to {results_file}, but pushing them to "
                f"{', '.join(plan.repos)} failed: {type(e).__name__}: {e}",
                field="hf_hub_log_args",
                hint=f"upload the files later, e.g. hf upload {plan.repos[0]} "
                f"{results_file.parent} --repo-type dataset",
            ) from None
