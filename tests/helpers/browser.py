"""Open a local HTML file in headless Chromium, as a person would: the DOM after its scripts ran,
what its console printed, and a screenshot.

    page = open_page(Path("report.html"), tmp_path)        (width=1280: a window that wide)
    page.dom              the serialized DOM (`--dump-dom`), after the page's scripts
    page.console          console messages and uncaught errors (Chromium's log on stderr)
    screenshot(Path("report.html"), Path("shot.png"), tmp_path, width=1280, height=2400)

Chromium runs with a profile, a home and a config folder of its own under `scratch` (it writes
crash-report settings into ~/.config otherwise), no network services, no GPU, no sandbox (root in
CI containers). `chromium_binary()` finds it or fails: set JAXEVAL_SKIP_BROWSER=1 to skip the
browser tests on a machine without it (CI installs it: .ci/run).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
]
CONSOLE = re.compile(r":INFO:CONSOLE[^\]]*\] (.*)")


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("JAXEVAL_SKIP_BROWSER") == "1":
        pytest.skip("JAXEVAL_SKIP_BROWSER=1: no browser on this machine")
    pytest.fail(
        "Chromium is not installed: apt-get install -y chromium (CI's .ci/run does), or set "
        "JAXEVAL_SKIP_BROWSER=1 to skip the browser tests"
    )


@dataclasses.dataclass
class Page:
    dom: str
    console: list[str]


def _run(args: list[str], scratch: Path) -> subprocess.CompletedProcess:
    home = scratch / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    profile = scratch / f"profile-{len(list(scratch.glob('profile-*')))}"
    command = [chromium_binary(), *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def open_page(html: Path, scratch: Path, *, width: int | None = None) -> Page:
    """The page's DOM after its scripts ran; `width`: the window's width in pixels."""
    size = [f"--window-size={width},900"] if width else []
    done = _run([*size, "--dump-dom", html.resolve().as_uri()], scratch)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [m.group(1) for m in CONSOLE.finditer(done.stderr)]
    return Page(done.stdout, console)


def screenshot(html: Path, png: Path, scratch: Path, *, width: int, height: int) -> Path:
    done = _run(
        [
            f"--screenshot={png.resolve()}",
            f"--window-size={width},{height}",
            html.resolve().as_uri(),
        ],
        scratch,
    )
    assert done.returncode == 0 and png.is_file(), done.stderr[-2000:]
    return png
