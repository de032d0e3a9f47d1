"""The wheels that travel with the prepared GPU run: listed, checked, installed, imported.

    python3 bench/device/carry.py specs                       # carry.txt's pins, one a line
    python3 bench/device/carry.py report DIR --limit-mib 55   # wheel sizes; every pin present
    python3 bench/device/carry.py install DIR --target SITE   # on the GPU machine (run.sh)
    PYTHONPATH=SITE python3 bench/device/carry.py check       # the modules gpu_run.py imports

`install` touches no network and no installed package: for each name in carry.txt that the
machine's python lacks, it picks the carried wheel (one whose tags this python accepts; of two
versions, the newest whose requirements the machine's own packages meet, fewest conflicts first),
then runs one `pip install --no-index --no-deps --target SITE` of those wheels and of jaxeval
(built from a temporary copy of this tree: setuptools from the machine, no build isolation). A
name with no usable wheel stops it before pip runs, with the reason. A name carried in two
versions (datasets) is then probed in a fresh process, and the other version replaces the first
if the probe fails. Requirements that an installed package of
another version fails are printed as warnings; requirements on packages absent everywhere are
not (lm-eval names several that gpu_run.py never imports: evaluate, scikit-learn, ...).

`specs` and `report` use the standard library only; `install` and `check` also `packaging`,
which transformers requires.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
CARRY = HERE / "carry.txt"

# What gpu_run.py's steps and tool runs import beyond jax/torch/transformers (`check`).
MODULES = (
    "datasets",
    "gguf",
    "pytablewriter",
    "pytz",  # imported late, by typepy, when lm_eval's CLI writes its table
    "sacrebleu",
    "accelerate",
    "lm_eval",
    "lm_eval.api.metrics",
    "lm_eval.utils",
    "lm_eval.__main__",
    "lm_eval.models.huggingface",
    "jaxeval",
    "jaxeval.cli",
    "jaxeval.kernels.score",
    "jaxeval.tasks",
    "jaxeval.lm.jax_lm",
)


def norm(name: str) -> str:
    """A distribution's normalized name (PEP 503): `DataProperty`, `lm_eval` -> `dataproperty`,
    `lm-eval`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def specs() -> list[tuple[str, str]]:
    """carry.txt's (name, version) pins in file order."""
    out = []
    for line in CARRY.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            out.append((norm(name), version.strip()))
    return out


def wheel_name(path: pathlib.Path) -> tuple[str, str]:
    """(normalized name, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return norm(name), version


def cmd_specs(_: argparse.Namespace) -> int:
    print("\n".join(f"{name}=={version}" for name, version in specs()))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    wheels = sorted(pathlib.Path(args.dir).glob("*.whl"))
    have = {wheel_name(w) for w in wheels}
    total = 0
    for w in wheels:
        total += w.stat().st_size
        print(f"  {w.stat().st_size / 2**20:7.2f} MiB  {w.name}")
    print(f"  {total / 2**20:7.2f} MiB  in all, {len(wheels)} wheels, in {args.dir}")
    missing = [f"{n}=={v}" for n, v in specs() if (n, v) not in have]
    extra = sorted(f"{n}=={v}" for n, v in have - set(specs()))
    ok = True
    if missing:
        print(f"carry.py: ERROR: no wheel for {', '.join(missing)}", file=sys.stderr)
        ok = False
    if extra:
        print(f"carry.py: ERROR: wheels not in carry.txt: {', '.join(extra)}", file=sys.stderr)
        ok = False
    if total > args.limit_mib * 2**20:
        print(f"carry.py: ERROR: {total / 2**20:.1f} MiB of wheels, over the {args.limit_mib} MiB "
              "that may travel beside the repository", file=sys.stderr)  # fmt: skip
        ok = False
    return 0 if ok else 1


# ---- install (on the GPU machine) ------------------------------------------------------------
def installed(name: str) -> str | None:
    """The version of `name` this python already has, else None."""
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def requirements(wheel: pathlib.Path) -> list[str]:
    """The wheel's Requires-Dist lines."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    head = text.split("\n\n", 1)[0]
    return [line.split(":", 1)[1].strip() for line in head.splitlines()
            if line.startswith("Requires-Dist:")]  # fmt: skip


def conflicts(wheel: pathlib.Path, carried: dict[str, str]) -> list[str]:
    """The wheel's requirements (no extras) that an installed or carried version fails."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for line in requirements(wheel):
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = norm(req.name)
        have = installed(name) or carried.get(name)
        if have is not None and not req.specifier.contains(have, prereleases=True):
            where = "installed" if installed(name) else "carried"
            out.append(f"{req.name}{req.specifier} ({where}: {have})")
    return out


def choose(args: argparse.Namespace) -> tuple[list[pathlib.Path], dict, list[str]]:
    """The wheels to install; per name carried in two versions, the other (tried when the first
    fails its probe); and the errors that stop the install."""
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename
    from packaging.version import Version

    accepted = set(sys_tags())
    folder = pathlib.Path(args.dir)
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    names: dict[str, list[str]] = {}
    for name, version in specs():
        names.setdefault(name, []).append(version)
    options: dict[str, list[pathlib.Path]] = {}  # name -> usable wheels, newest first
    errors: list[str] = []
    for name, versions in names.items():
        have = installed(name)
        if have is not None:
            print(f"  there      {name} {have}")
            continue
        found = [w for w in wheels if wheel_name(w) in {(name, v) for v in versions}]
        usable = [w for w in found if accepted & set(parse_wheel_filename(w.name)[3])]
        if not usable:
            why = (f"carried {', '.join(w.name for w in found)}, none for this python "
                   f"({next(iter(sys_tags()))})") if found else "no wheel carried"  # fmt: skip
            errors.append(f"{name}=={' or '.join(versions)}: {why}")
            continue
        options[name] = sorted(usable, key=lambda w: Version(wheel_name(w)[1]), reverse=True)
    # The newest of each; then, where there are two, fewest conflicts first (newest first among
    # equals) against the machine's packages and the other carried picks.
    carried = {name: wheel_name(ws[0])[1] for name, ws in options.items()}
    for name, ws in options.items():
        if len(ws) > 1:
            ws.sort(key=lambda w: len(conflicts(w, carried)))  # stable: newest first on ties
            carried[name] = wheel_name(ws[0])[1]
    for name, ws in options.items():
        problems = conflicts(ws[0], carried)
        print(f"  carried    {name} {carried[name]}"
              + (f"   WARNING: needs {'; '.join(problems)}" if problems else ""))  # fmt: skip
    others = {name: ws[1:] for name, ws in options.items() if len(ws) > 1}
    return [ws[0] for ws in options.values()], others, errors


# Run after the install, in a fresh process, for a name carried in two versions: the first that
# passes stays. datasets 5.2 imports `huggingface_hub.utils.httpx` (huggingface-hub >= 1.31),
# 4.8.5 works with 1.x and pyarrow >= 21: both load JSON rows as lm-eval's tasks do.
PROBES = {
    "datasets": (
        "import os, sys, tempfile\n"
        "os.environ.update(HF_HUB_OFFLINE='1', HF_DATASETS_OFFLINE='1',\n"
        "                  HF_DATASETS_CACHE=tempfile.mkdtemp())\n"
        "import datasets\n"
        "rows = datasets.load_dataset('json', data_files=sys.argv[1], split='train')\n"
        "assert len(rows) > 0\n"
    ),
}
# What setup.py and pyproject.toml build jaxeval from.
TREE = ("setup.py", "pyproject.toml", "README.md", "jaxeval", "kernels", "tasks", "configs")
PROBE_DATA = REPO / "tests" / "data" / "lambada_openai" / "test.jsonl"


def pip_install(target: str, items: list[str], *extra: str) -> int:
    """pip with no index, no config file and no PIP_* setting: it installs these and nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PYTHONPATH="")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
           "--no-build-isolation", "--no-compile", "--no-cache-dir", "--disable-pip-version-check",
           "--target", target, *extra, *items]  # fmt: skip
    return subprocess.run(cmd, env=env).returncode


def probe(name: str, target: str) -> str | None:
    """None when `name` as installed in `target` passes its probe, else the error's last line."""
    path = os.pathsep.join(p for p in (target, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    with tempfile.TemporaryDirectory() as cwd:  # the repository's folders off sys.path
        done = subprocess.run([sys.executable, "-c", PROBES[name], str(PROBE_DATA)], env=env,
                              cwd=cwd, capture_output=True, text=True)  # fmt: skip
    lines = (done.stderr or done.stdout).strip().splitlines()
    return None if done.returncode == 0 else (lines[-1] if lines else f"exit {done.returncode}")


def source_tree(tmp: pathlib.Path) -> str:
    """A copy of what setup.py packages, so that the build writes nothing into the repository
    (and no stale build/ folder left there feeds the install)."""
    for name in TREE:
        src, dst = REPO / name, tmp / name
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    return str(tmp)


def cmd_install(args: argparse.Namespace) -> int:
    try:
        import packaging.version  # noqa: F401 - needed by choose()
    except ImportError:
        print("carry.py: ERROR: this python has no `packaging` (transformers needs it): is this "
              "the python that holds torch and transformers?", file=sys.stderr)  # fmt: skip
        return 2
    print(f"carry.py: {sys.executable} ({sys.version.split()[0]}); wheels from {args.dir}")
    wheels, others, errors = choose(args)
    setuptools = installed("setuptools")
    if setuptools is None or int(setuptools.split(".")[0]) < 69:
        errors.append(f"setuptools>=69 (builds jaxeval from this tree): found {setuptools}")
    if errors:
        print("carry.py: ERROR: cannot install what gpu_run.py needs:", file=sys.stderr)
        for e in errors:
            print(f"    {e}", file=sys.stderr)
        print(
            "  Here (with PyPI): `bash bench/device/prepare.sh`, then carry `.devcarry`. The "
            "wheels must match this python (PYTHON_VERSION=3.12 by default).",
            file=sys.stderr,
        )
        return 2
    print(f"carry.py: pip install --target {args.target}: {len(wheels)} wheels and jaxeval",
          flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tree:
        rc = pip_install(args.target, [*map(str, wheels), source_tree(pathlib.Path(tree))])
    if rc:
        print(f"carry.py: ERROR: pip install failed (exit {rc})", file=sys.stderr)
        return rc
    for name, rest in others.items():
        if name not in PROBES:
            continue
        error = probe(name, args.target)
        current = next(w for w in wheels if wheel_name(w)[0] == name)
        while error and rest:
            wheel = rest.pop(0)
            print(f"carry.py: {name} failed its probe ({error[:300]}); trying {wheel.name}")
            uninstall(current, args.target)
            pip_install(args.target, [str(wheel)])
            current, error = wheel, probe(name, args.target)
        print(f"carry.py: {name} {installed_in(name, args.target)}: "
              + (f"FAILED its probe: {error[:300]}" if error else "loads JSON rows"))  # fmt: skip
    return 0


def uninstall(wheel: pathlib.Path, target: str) -> None:
    """Removes from `target` the top-level folders and files that `wheel` installed there."""
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/", 1)[0] for n in z.namelist()}
    for top in tops:
        path = pathlib.Path(target) / top
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def installed_in(name: str, target: str) -> str | None:
    """The version of `name` installed in `target`."""
    found = list(md.distributions(name=name, path=[target]))
    return found[0].version if found else None


def cmd_check(_: argparse.Namespace) -> int:
    failed = 0
    for module in MODULES:
        try:
            importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - every module is tried and reported
            failed += 1
            print(f"  FAILED  import {module}: {type(e).__name__}: {e}")
            print("          " + traceback.format_exc().strip().splitlines()[-3][:300])
    versions = {n: installed(n) for n in ("jax", "torch", "transformers", "lm-eval", "datasets")}
    print("  " + ", ".join(f"{n} {v}" for n, v in versions.items()))
    print(f"carry.py: {len(MODULES) - failed} of {len(MODULES)} modules import")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("specs")
    p = sub.add_parser("report")
    p.add_argument("dir")
    p.add_argument("--limit-mib", type=float, default=55)
    p = sub.add_parser("install")
    p.add_argument("dir")
    p.add_argument("--target", required=True)
    sub.add_parser("check")
    args = ap.parse_args()
    return {"specs": cmd_specs, "report": cmd_report, "install": cmd_install,
            "check": cmd_check}[args.cmd](args)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
