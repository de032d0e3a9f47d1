"""Send results where people track experiments: Weights & Biases, the Hugging Face Hub, and a
training loop's own logger.

Public surface:
    flatten_results(results, prefix="eval") -> {"eval/<task>/<metric>[/<filter>]": float}
    TensorBoardLogger(logdir).log_results(results, step=)    event files (tensorboardX)
    WandbStepLogger(run=None, **wandb_init).log_results(results, step=)
    WandbTracker(init_args, config_args)    `--wandb_args` / `--wandb_config_args`, lm-eval's logging
    HubLogArgs, plan_hub_upload, check_hub_access, push_to_hub    `--hf_hub_log_args`
    merge_dict_args(values, flag)           lm-eval's key=value dict flags

The optional packages load only when a logger is built: `pip install "jaxeval[wandb]"`,
`pip install "jaxeval[tensorboard]"`; `huggingface_hub` comes with transformers.
"""

from jaxeval.trackers.args import merge_dict_args
from jaxeval.trackers.hub import HubLogArgs, check_hub_access, plan_hub_upload, push_to_hub
from jaxeval.trackers.training import TensorBoardLogger, WandbStepLogger, flatten_results
from jaxeval.trackers.wandb import WandbTracker

__all__ = [
    "HubLogArgs",
    "TensorBoardLogger",
    "WandbStepLogger",
    "WandbTracker",
    "check_hub_access",
    "flatten_results",
    "merge_dict_args",
    "plan_hub_upload",
    "push_to_hub",
]
