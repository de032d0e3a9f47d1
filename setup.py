"""Package discovery for jaxeval.

The repository keeps `tasks/` (the YAML library) and `configs/` at the top level but installs them
as `jaxeval.tasks` and `jaxeval.configs`. The kernels live in the package itself
(`jaxeval/kernels/`), so no top-level `kernels` folder can shadow Hugging Face's `kernels` package.
Everything else lives in pyproject.toml.
"""

from setuptools import find_packages, setup

MAPPED = {"jaxeval.tasks": "tasks", "jaxeval.configs": "configs"}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages = find_packages(include=["jaxeval", "jaxeval.*"])
    package_dir = {"jaxeval": "jaxeval"}
    for name, folder in MAPPED.items():
        packages.append(name)
        package_dir[name] = folder
        for sub in find_packages(where=folder):
            packages.append(f"{name}.{sub}")
            package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return packages, package_dir


_PACKAGES, _PACKAGE_DIR = _packages()
setup(packages=_PACKAGES, package_dir=_PACKAGE_DIR)
