"""The Hugging Face Hub, asked once whether it can be reached, so an offline host fails in a second.

Without a network, `datasets` and `huggingface_hub` retry every request for about 25 s before they
give up. `offline_unless_reachable()` opens one TCP connection to the hub (`HF_ENDPOINT`, else
huggingface.co:443) before any data loads; when it fails, the run goes offline as if the user had
set `HF_HUB_OFFLINE=1` and `HF_DATASETS_OFFLINE=1`: datasets and models come from the local caches,
and one warning line says so.

    jaxeval validate --tasks arc_easy            (no network)
    WARNING jaxeval.cli.hub: the Hugging Face Hub (huggingface.co) cannot be reached: ...
    jaxeval: error: task 'arc_easy', field 'dataset_path': could not load dataset ...
      What to do: ... --data_dir DIR ...

Nothing is probed when the user already chose (`HF_HUB_OFFLINE` or `HF_DATASETS_OFFLINE` set), or
when a proxy is configured (the direct connection says nothing about the proxy's).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from urllib.parse import urlparse

log = logging.getLogger(__name__)

OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
PROBE_TIMEOUT_S = 3.0


def hub_address() -> tuple[str, int]:
    """(host, port) of `HF_ENDPOINT`, else huggingface.co's."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def offline_unless_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Goes offline (module docstring) when the hub cannot be reached; True if it did."""
    if any(name in os.environ for name in (*OFFLINE_VARS, *PROXY_VARS)):
        return False
    host, port = hub_address()
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return False
    except OSError as e:
        reason = e.strerror or type(e).__name__
    for name in OFFLINE_VARS:
        os.environ[name] = "1"
    # read at import by these libraries; a process that already imported them is told directly
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    config = sys.modules.get("datasets.config")
    if config is not None:
        config.HF_HUB_OFFLINE = True
    log.warning(
        "the Hugging Face Hub (%s) cannot be reached (%s): datasets and models come from the "
        "local cache only, as with HF_HUB_OFFLINE=1; give local copies with --data_dir DIR",
        host,
        reason,
    )
    return True
