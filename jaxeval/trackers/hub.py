"""`--hf_hub_log_args`: push the results (and samples) files to Hugging Face Hub datasets, with
lm-eval's keys and repository names.

    jaxeval run ... --output_path out/ --log_samples \\
        --hf_hub_log_args hub_results_org=my-org,details_repo_name=evals,push_samples_to_hub=True

Repositories (lm-eval's `EvaluationTracker`): details `<org>/<details_repo_name or
"lm-eval-results">`, results `<org>/<results_repo_name or the details name>`; `hub_repo_name`
names both; both get a `-private` suffix and are private unless `public_repo=True`; `org` is
`hub_results_org`, else the token's owner (`whoami`). What goes where:

    push_results_to_hub   results_<date>.json -> <results repo>/<model name>/results_<date>.json
    push_samples_to_hub   results and samples_<task>_<date>.jsonl of this run
                          -> <details repo>/<sanitized model name>/...    (gated=True: gated "auto")
    either                a dataset card with one config per model and task (`hub_card.py`)

`plan_hub_upload` lists those files and paths; `push_to_hub` uploads exactly that plan.
`check_hub_access` runs before the model loads: a token, and the Hub answering `whoami` within a
short timeout, or a `JaxevalError` saying which is missing. The token comes from `token=`,
`HF_TOKEN`, or `hf auth login`. Differences from lm-eval: pushing without `--output_path` is an
error (lm-eval pushes nothing, silently); only this run's files are uploaded (lm-eval uploads the
whole output folder once per task), in one commit per repository.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
from pathlib import Path
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.results.files import sanitize_model_name
from jaxeval.trackers.hub_card import dataset_card

log = logging.getLogger(__name__)
DEFAULT_REPO_NAME = "lm-eval-results"


@dataclasses.dataclass(frozen=True, kw_only=True)
class HubLogArgs:
    """The keys of `--hf_hub_log_args` (lm-eval's `EvaluationTracker` arguments)."""

    hub_results_org: str = ""
    hub_repo_name: str = ""
    details_repo_name: str = ""
    results_repo_name: str = ""
    push_results_to_hub: bool = False
    push_samples_to_hub: bool = False
    public_repo: bool = False
    token: str = ""
    leaderboard_url: str = ""
    point_of_contact: str = ""
    gated: bool = False

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            wanted = bool if field.type in ("bool", bool) else str
            if not isinstance(value, wanted):
                raise JaxevalError(
                    f"{field.name}={value!r} must be {'True or False' if wanted is bool else 'text'}",
                    field="hf_hub_log_args",
                    hint=f"write {field.name}=True"
                    if wanted is bool
                    else f"quote it: {field.name}='{value}'",
                )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> HubLogArgs:
        known = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean '{near[0]}'? " if near else ""
                if key == "output_path":
                    hint = "give the folder with --output_path; "
                raise JaxevalError(
                    f"unknown key '{key}' in --hf_hub_log_args",
                    field="hf_hub_log_args",
                    hint=f"{hint}known keys: {', '.join(known)}",
                )
        return cls(**values)

    @property
    def pushes(self) -> bool:
        return self.push_results_to_hub or self.push_samples_to_hub

    def repo_ids(self, org: str) -> tuple[str, str]:
        """(details repo, results repo), `-private` unless public_repo (lm-eval's naming)."""
        if self.hub_repo_name:
            details = results = self.hub_repo_name
        else:
            details = self.details_repo_name or DEFAULT_REPO_NAME
            results = self.results_repo_name or details
        suffix = "" if self.public_repo else "-private"
        return f"{org}/{details}{suffix}", f"{org}/{results}{suffix}"


@dataclasses.dataclass(frozen=True)
class HubCommit:
    """Files for one commit to one dataset repository: (local file, path in the repository)."""

    repo_id: str
    files: tuple[tuple[Path, str], ...]
    message: str


@dataclasses.dataclass(frozen=True)
class HubPlan:
    """Everything one run uploads: commits in order, the repositories, gating and the card."""

    commits: tuple[HubCommit, ...]
    private: bool
    gated_repo: str | None  # set gated="auto" on this repository (the details one), if any
    card_repo: (
        str  # where the dataset card goes: the details repository if samples go, else results
    )
    model_name: str
    model_source: str
    leaderboard_url: str = ""
    point_of_contact: str = ""

    @property
    def repos(self) -> list[str]:
        return list(dict.fromkeys(c.repo_id for c in self.commits))


def plan_hub_upload(
    args: HubLogArgs,
    *,
    org: str,
    model_name: str,
    model_source: str,
    results_file: Path,
    samples_files: list[Path],
) -> HubPlan:
    """The commits `push_to_hub` makes for one run's files (module docstring's table)."""
    details, results_repo = args.repo_ids(org)
    model_name = model_name or "unnamed-model"
    commits = []
    if args.push_results_to_hub:
        commits.append(
            HubCommit(
                results_repo,
                ((results_file, f"{model_name}/{results_file.name}"),),
                f"Adding aggregated results for {model_name}",
            )
        )
    if args.push_samples_to_hub and samples_files:
        folder = sanitize_model_name(model_name)
        files = [results_file, *sorted(samples_files)]
        commits.append(
            HubCommit(
                details,
                tuple((f, f"{folder}/{f.name}") for f in files),
                f"Adding samples results for {model_name}",
            )
        )
    gated = details if args.gated and args.push_samples_to_hub and samples_files else None
    card_repo = details if args.push_samples_to_hub and samples_files else results_repo
    return HubPlan(
        tuple(commits),
        not args.public_repo,
        gated,
        card_repo,
        model_name,
        model_source,
        args.leaderboard_url,
        args.point_of_contact,
    )


def hub_token(args: HubLogArgs) -> str | None:
    if args.token:
        return args.token
    from huggingface_hub import get_token  # optional at start-up: only when pushing

    return os.environ.get("HF_TOKEN") or get_token()


def check_hub_access(
    args: HubLogArgs, *, endpoint: str | None = None, timeout: float = 10.0
) -> str:
    """Before the model loads: the organisation to push to, after the Hub accepted the token.
    Nothing to push: `hub_results_org` as given, and no network."""
    if not args.pushes:
        return args.hub_results_org
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    token = hub_token(args)
    if not token:
        raise JaxevalError(
            "pushing results to the Hugging Face Hub needs a token with write access",
            field="hf_hub_log_args",
            hint="set HF_TOKEN=hf_..., run `hf auth login`, or add token=... to --hf_hub_log_args",
        )
    endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
    try:
        response = get_session().get(
            f"{endpoint}/api/whoami-v2", headers=build_hf_headers(token=token), timeout=timeout
        )
        hf_raise_for_status(response)
        who = response.json()
    except OfflineModeIsEnabled:
        raise JaxevalError(
            "cannot push to the Hugging Face Hub: offline mode is on (HF_HUB_OFFLINE=1)",
            field="hf_hub_log_args",
            hint="unset HF_HUB_OFFLINE to push, or drop push_results_to_hub/push_samples_to_hub "
            "and upload the --output_path files later",
        ) from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        raise JaxevalError(
            f"the Hugging Face Hub refused the token (HTTP {status} from {endpoint}/api/whoami-v2)",
            field="hf_hub_log_args",
            hint="use a token with write access (https://huggingface.co/settings/tokens)",
        ) from None
    except Exception as e:  # httpx's connection and timeout errors, DNS failures
        raise JaxevalError(
            f"cannot reach the Hugging Face Hub at {endpoint} within {timeout:g} s "
            f"({type(e).__name__}: {e})",
            field="hf_hub_log_args",
            hint="check the network (or HF_ENDPOINT), or run without push_results_to_hub/"
            "push_samples_to_hub and upload the --output_path files later",
        ) from None
    return args.hub_results_org or who["name"]


def push_to_hub(
    plan: HubPlan, *, token: str | None, results: dict[str, Any], endpoint: str | None = None
) -> None:
    """Creates the repositories, makes the plan's commits, gates, and writes the dataset card."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=endpoint, token=token)
    for commit in plan.commits:
        api.create_repo(
            repo_id=commit.repo_id, repo_type="dataset", private=plan.private, exist_ok=True
        )
        operations = [CommitOperationAdd(path, str(local)) for local, path in commit.files]
        api.create_commit(
            commit.repo_id, operations, commit_message=commit.message, repo_type="dataset"
        )
        log.warning("pushed %d file(s) to https://huggingface.co/datasets/%s",
                    len(operations), commit.repo_id)  # fmt: skip
    if plan.gated_repo:
        try:
            api.update_repo_settings(plan.gated_repo, gated="auto", repo_type="dataset")
        except Exception as e:  # lm-eval also goes on without the gate
            log.warning("could not gate %s: %s", plan.gated_repo, e)
    files = api.list_repo_files(plan.card_repo, repo_type="dataset")
    card = dataset_card(
        plan.card_repo,
        files,
        results,
        model_name=plan.model_name,
        model_source=plan.model_source,
        leaderboard_url=plan.leaderboard_url,
        point_of_contact=plan.point_of_contact,
    )
    card.push_to_hub(plan.card_repo, repo_type="dataset", token=token)
