"""What the harness's process starts with: its environment (an allowlist) and the files hidden from it.

`child_env(env)` keeps only the variables `CHILD_ENV` names (no key, token or URL, whatever its name);
`gold_files()` lists τ²'s task files, which the sandbox covers. Used by `agent_wire.AgentProcess` when it
starts the fork server; this module must not import harness code.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variables the child does not get: keys and the run's addresses (it calls nothing itself).
#: Kept for callers; the child's environment is built from `CHILD_ENV` (an allowlist), so any other
#: variable (any key, token or URL) is not passed either.
HIDDEN_ENV_PREFIXES = ("OPENAI_", "ECDYSIS_", "ANTHROPIC_", "AWS_", "AZURE_", "GITHUB_", "GH_")
#: The only variables of the trial process's environment the child gets (names, or prefixes ending in
#: `*`): what Python, τ² and locale handling read. Harness code reads no environment (static check).
CHILD_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "TMPDIR",
    "LC_*",
    "PYTHONHASHSEED",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONUNBUFFERED",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
    "VIRTUAL_ENV",
    "LITELLM_LOCAL_MODEL_COST_MAP",
)


def child_env(env: dict[str, str] | os._Environ) -> dict[str, str]:
    """The variables of `env` named in `CHILD_ENV` (exact names, or `LC_*`-style prefixes)."""
    names = {n for n in CHILD_ENV if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in CHILD_ENV if n.endswith("*"))
    return {k: v for k, v in env.items() if k in names or k.startswith(prefixes)}


def gold_files() -> list[Path]:
    """τ²'s task files (evaluation criteria, splits): covered in the sandbox; the child needs only the
    domains' databases and policies.

    Raises:
        UsageError: τ² does not import (not installed, or this suite's folder shadows it): the same message
            as `tau2lib.load_tau2`, since this can be the first τ² import of a worker (`start_early`).
    """
    try:
        from tau2.utils.utils import DATA_DIR
    except ImportError as exc:
        from ..tasks.tau2lib import UsageError, _missing

        raise UsageError(_missing(exc)) from None

    domains = Path(DATA_DIR) / "tau2" / "domains"
    return sorted(p for p in domains.glob("*/*.json") if p.name.startswith(("tasks", "split_tasks")))
