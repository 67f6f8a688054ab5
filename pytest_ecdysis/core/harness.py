"""Harness resolution, identity and loading.

A harness is a directory holding a Python package whose `__init__.py` defines

    build_agent(*, tools, domain_policy, client, model, **options) -> tau2-style agent

(the suite decides what an agent is; see `pytest_ecdysis_tau2/README` for τ²'s interface). Its id is
`<name>@<first 12 hex of the sha256 over its files' paths and bytes>`.
This module never imports tau2 and loads harness code only when `load_harness` is called (workers).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from pytest_ecdysis.core.errors import UsageError

_IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache"}


def harness_files(directory: Path) -> list[Path]:
    """The files that make up a harness, sorted, relative to `directory` (bytecode caches excluded)."""
    files = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if path.is_file() and not (_IGNORED_PARTS & set(rel.parts)) and path.suffix not in (".pyc", ".pyo"):
            files.append(rel)
    return files


def harness_id(directory: Path, name: str | None = None) -> str:
    """`<name>@<12 hex>`: sha256 over each file's relative POSIX path and bytes, in sorted order."""
    digest = hashlib.sha256()
    for rel in harness_files(directory):
        digest.update(rel.as_posix().encode() + b"\0")
        digest.update((directory / rel).read_bytes() + b"\0")
    return f"{name or directory.name}@{digest.hexdigest()[:12]}"


def resolve_harness(value: str, rootdir: Path) -> Path:
    """An existing directory first (relative to cwd, then `rootdir`), else a registered name.

    Raises:
        UsageError: neither a directory nor a registered name, or the directory has no `__init__.py`.
    """
    for candidate in (Path(value), rootdir / value):
        if candidate.is_dir():
            directory = candidate.resolve()
            break
    else:
        from pytest_ecdysis.core.registry import registered_harnesses

        named = registered_harnesses()
        if value in named:  # `example_harness` (the default) and `direct` are the τ² suite's
            directory = Path(named[value]).resolve()
        else:
            known = ", ".join(sorted(named)) or "none installed"
            raise UsageError(
                f"--ecdysis-harness {value!r} is neither a directory nor a registered harness name "
                f"(registered: {known}); pass the path of your harness package"
            )
    if not (directory / "__init__.py").is_file():
        raise UsageError(
            f"harness directory {directory} has no __init__.py; a harness is a Python package "
            "whose __init__.py defines build_agent(...)"
        )
    return directory


def load_harness(directory: Path) -> ModuleType:
    """Import the harness package at `directory` under a name unique to its id.

    Raises:
        UsageError: the package fails to import or defines no `build_agent`.
    """
    hid = harness_id(directory)
    modname = "ecdysis_harness_" + hid.split("@")[1]
    module = sys.modules.get(modname)
    if module is None:
        spec = importlib.util.spec_from_file_location(
            modname, directory / "__init__.py", submodule_search_locations=[str(directory)]
        )
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[modname]
            raise UsageError(f"harness {directory} failed to import: {type(exc).__name__}: {exc}") from exc
    if not callable(getattr(module, "build_agent", None)):
        raise UsageError(
            f"harness {directory} does not provide an agent: define build_agent(...) in __init__.py"
        )
    return module
