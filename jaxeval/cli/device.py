"""`--device`: lm-eval's device names read as a JAX platform, checked present before anything loads.

    --device cpu | cuda | gpu | tpu      that platform (jaxeval shards over all of its devices)
    --device cuda:1 | cpu:5              the same, and device N must exist there
    --device tpu   (no TPU attached)     error; libtpu is never started to find out
    --device cuda  (no CUDA plugin)      error
    --device mps                         error: not a JAX platform

`select_platform` runs before JAX starts a backend (and before a multi-process run joins);
`check_device` after, when asking JAX for the platform's devices is safe.
"""

from __future__ import annotations

import importlib.util
import logging

from jaxeval.errors import JaxevalError

log = logging.getLogger(__name__)

PLATFORMS = {"cpu": "cpu", "cuda": "cuda", "gpu": "cuda", "tpu": "tpu"}
CUDA_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins.xla_cuda12")
_INSTEAD = "use --device cpu, or leave --device out and JAX picks the accelerator it finds"


def parse_device(device: str) -> tuple[str, int | None]:
    """`"cuda:1"` -> ("cuda", 1); an unknown platform or a bad index is a `JaxevalError`."""
    name, _, index = device.strip().lower().partition(":")
    platform = PLATFORMS.get(name)
    if platform is None:
        raise JaxevalError(
            f"--device {device!r} is not a JAX platform",
            field="device",
            hint="use cpu, cuda (or gpu) or tpu, optionally with :N; jaxeval shards over every "
            "device of that platform",
        )
    if not index:
        return platform, None
    if not index.isdigit():
        raise JaxevalError(
            f"--device {device!r}: the device index {index!r} is not a number",
            field="device",
            hint=f"write {name}:N with N from 0, or just {name}",
        )
    return platform, int(index)


def _absent(platform: str) -> str | None:
    """Why `platform` cannot be present here, told without starting it; None when it may be."""
    if platform == "tpu":
        # start-up: the host check reads /dev and sysfs only
        from jaxeval.platform.tpu_host import tpu_attached

        if importlib.util.find_spec("libtpu") is None:
            return "libtpu is not installed"
        if not tpu_attached():
            return "no TPU is attached to this host"
    if platform == "cuda" and not any(_spec(name) for name in CUDA_PLUGINS):
        return "JAX's CUDA plugin is not installed (pip install 'jax[cuda12]')"
    return None


def _spec(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        return False


def select_platform(device: str | None) -> None:
    """Points JAX at `--device`'s platform (before a backend starts); None keeps JAX's choice."""
    if not device:
        return
    platform, _ = parse_device(device)
    why = _absent(platform)
    if why is not None:
        raise JaxevalError(f"--device {device!r}: {why}", field="device", hint=_INSTEAD)
    import jax

    jax.config.update("jax_platforms", platform)


def check_device(device: str | None) -> None:
    """The platform starts and holds device N (after `select_platform`, once JAX may start)."""
    if not device:
        return
    platform, index = parse_device(device)
    import jax

    try:
        devices = jax.devices(platform)
    except Exception as e:  # noqa: BLE001  (JAX raises RuntimeError, a plugin AssertionError)
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise JaxevalError(
            f"--device {device!r}: JAX has no {platform} device here ({detail})",
            field="device",
            hint=_INSTEAD,
        ) from None
    if index is None:
        return
    if index >= len(devices):
        raise JaxevalError(
            f"--device {device!r}: there is no {platform} device {index}; this host has "
            f"{len(devices)} ({platform}:0 to {platform}:{len(devices) - 1})",
            field="device",
            hint=f"give an index below {len(devices)}, or --device {platform}",
        )
    if len(devices) > 1:
        log.warning(
            "--device %s: jaxeval shards over all %d %s devices; the index only checks that "
            "device %d exists",
            device,
            len(devices),
            platform,
            index,
        )
