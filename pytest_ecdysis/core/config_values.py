"""The checks of option values, one function a kind of value, and the model-call limits.

Each check takes the option's name (without `--ecdysis-`) and its raw value (`options._raw`) and returns
the value to keep, or raises one `UsageError` that names the option and the value it wants.
`config.read_config` calls them; `cli` reuses them for the `ecdysis` command's flags. The time limits and
retries of model calls (`LIMITS`) have, besides option and ini key, environment fallbacks, read here
(`read_limits`) for pytest sessions and runs outside pytest alike. This module must not import tau2, task
suites or harnesses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.errors import UsageError

#: Time limits (seconds) and retries of model calls; each has an option, an ini key and an env fallback.
DEFAULT_CALL_TIMEOUT_S = 60.0  # one model call, whole response included
DEFAULT_MAX_RETRIES = 3
DEFAULT_TRIAL_BUDGET_S = 900.0  # a τ² trial makes ~10-60 model calls
DEFAULT_DIAGNOSIS_BUDGET_S = 1800.0  # one round's roles: 3 x K passes + a moderator, up to 180 s per call
DEFAULT_EDITOR_BUDGET_S = 900.0  # one round's edit (the builtin editor's calls or a cmd: editor's process)
#: option name -> (config field, env fallbacks in order, default, kind); kind "int" is a count >= 0,
#: "seconds" a number > 0.
LIMITS: dict[str, tuple[str, tuple[str, ...], float, str]] = {
    "call-timeout": ("call_timeout_s", ("ECDYSIS_CALL_TIMEOUT_S",), DEFAULT_CALL_TIMEOUT_S, "seconds"),
    "max-retries": ("max_retries", ("ECDYSIS_MAX_RETRIES",), DEFAULT_MAX_RETRIES, "int"),
    "trial-budget": ("trial_budget_s", ("ECDYSIS_TRIAL_BUDGET_S",), DEFAULT_TRIAL_BUDGET_S, "seconds"),
    "diagnosis-budget": ("diagnosis_budget_s", ("ECDYSIS_DIAGNOSIS_BUDGET_S",), DEFAULT_DIAGNOSIS_BUDGET_S, "seconds"),
    "editor-budget": ("editor_budget_s", ("ECDYSIS_EDITOR_BUDGET_S", "ECDYSIS_EDITOR_TIMEOUT"),
                      DEFAULT_EDITOR_BUDGET_S, "seconds"),
}


def _int(name: str, value: Any, minimum: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"--ecdysis-{name} must be an integer >= {minimum}, got {value!r}") from None
    if number < minimum:
        raise UsageError(f"--ecdysis-{name} must be an integer >= {minimum}, got {number}")
    return number


def _float(name: str, value: Any, lo: float, hi: float | None) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"--ecdysis-{name} must be a number, got {value!r}") from None
    if not (number >= lo and (hi is None or number <= hi)):  # NaN fails both comparisons
        span = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise UsageError(f"--ecdysis-{name} must be {span}, got {number}")
    return number


def level(name: str, value: Any) -> float:
    """A test's level (`--ecdysis-accept-level`): a number in the open interval (0, 1); one message for any
    other value (a bound in [0, 1] was said to be allowed, then refused)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not 0.0 < number < 1.0:  # NaN fails the comparison
        raise UsageError(f"--ecdysis-{name} must be a number strictly between 0 and 1 (e.g. 0.05), got "
                         f"{value if number is None else number!r}")
    return number


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise UsageError(f"--ecdysis-{name} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _limit(name: str, value: Any, source: str) -> float | int:
    field, _, _, kind = LIMITS[name]
    where = f" (from {source})" if source.startswith("env") else ""
    try:
        number = int(value) if kind == "int" else float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or (kind == "int" and number < 0) or (kind == "seconds" and not number > 0):
        want = "an integer >= 0" if kind == "int" else "a number of seconds > 0"
        raise UsageError(f"--ecdysis-{name} must be {want}, got {value!r}{where}; set --ecdysis-{name} "
                         f"(or ini ecdysis_{name.replace('-', '_')})")
    return number


def read_limits(raw: dict[str, Any], env: Any = None) -> dict[str, float | int]:
    """The time limits and retries: option, else ini (both in `raw`), else env fallback, else default.

    Returns `{config field: value}`. Raises UsageError for a zero or negative budget or timeout, retries
    below 0, or a value that is not a number (the message names where it came from).
    """
    env = os.environ if env is None else env
    out: dict[str, float | int] = {}
    for name, (field, env_names, default, _) in LIMITS.items():
        value, source = raw.get(name), f"--ecdysis-{name}"
        for env_name in env_names:
            if value is None and env.get(env_name) not in (None, ""):
                value, source = env[env_name], f"env {env_name}"
        out[field] = _limit(name, default if value is None else value, source)
    return out


def endpoint_limits_from_env() -> dict[str, float | int]:
    """`{call_timeout_s, max_retries, trial_budget_s}` from the env fallbacks (for runs outside pytest)."""
    limits = read_limits({})
    return {k: limits[k] for k in ("call_timeout_s", "max_retries", "trial_budget_s")}


def _anchored(config: Any, opt_name: str, value: Any) -> Path:
    """A path option as a Path. Given on the command line it means what it says (relative to the directory
    pytest was started in, like `--junitxml`); from the ini file or the default it is relative to the
    rootdir, so a run started from a subdirectory writes to the same `.ecdysis/` (which `.gitignore`
    covers) and reads the same baseline. Returned relative to the current directory when it can be."""
    path = Path(value)
    if path.is_absolute() or config.getoption("ecdysis_" + opt_name.replace("-", "_")) is not None:
        return path
    anchored = Path(str(config.rootpath)) / path
    try:
        return Path(os.path.relpath(anchored))
    except ValueError:  # another drive (Windows)
        return anchored


def check_needs(config: Any, evolve: bool, gate: bool) -> None:
    """Options that only an evolution or a gate reads (`options.Option.needs`) given on the command line of
    a session that does neither: one `UsageError` naming them all (they would be silently ignored). The
    ini mirrors stay allowed: a project's ini may hold its evolution and gate settings.

    Raises:
        UsageError: e.g. `--ecdysis-rounds 5` without `--ecdysis-evolve`.
    """
    from pytest_ecdysis.core.options import OPTIONS, given_on_command_line

    args = tuple(getattr(getattr(config, "invocation_params", None), "args", ()) or ())
    jobs = {"evolve": evolve, "gate": gate}
    idle = [o for o in OPTIONS if o.needs and not any(jobs[j] for j in o.needs) and given_on_command_line(args, o)]
    if not idle:
        return
    job = {"evolve": "an evolution", "gate": "the gate"}
    flag = {"evolve": "--ecdysis-evolve (or --ecdysis-resume RUN_ID)", "gate": "--ecdysis-gate"}
    lines = [f"--ecdysis-{o.name} is read only by {' or '.join(job[j] for j in o.needs)}: it needs "
             f"{' or '.join(flag[j] for j in o.needs)}" for o in idle]
    keys = ", ".join("ecdysis_" + o.name.replace("-", "_") for o in idle if o.ini)
    keep = f", or keep the setting in the ini file ({keys}), which other sessions ignore" if keys else ""
    raise UsageError("; ".join(lines) + f". Without it the option would be silently ignored: drop it, add the "
                     f"job{keep}")


def _ablate(value: bool, evolve: bool) -> bool:
    """`--ecdysis-ablate`: on only in an evolution (given on the command line without one, `check_needs`
    refuses it; the ini mirror `ecdysis_ablate = true` is ignored by sessions that do not evolve)."""
    return value and evolve


def _extra_trials(value: Any, rule: str) -> int:
    """`--ecdysis-accept-extra-trials K`: an integer >= 0, above 0 only with `--ecdysis-accept paired` (K more
    trials of the flipped tasks) or `sequential` (at most K confirmation looks; 0: `evolve.confirm.DEFAULT_LOOKS`).

    Raises:
        UsageError: not an integer >= 0, or K > 0 under `strict` (its verdict is the score, not a test).
    """
    k = _int("accept-extra-trials", value, 0)
    if k and rule not in ("paired", "sequential"):
        raise UsageError(f"--ecdysis-accept-extra-trials {k} adds trials before a paired test: it needs "
                         "--ecdysis-accept paired or sequential (the strict rule compares the two runs' scores as "
                         "they are)")
    return k


def _nonce(value: Any) -> str | None:
    """`--ecdysis-sim-nonce`: any non-blank text, else None (unset)."""
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        raise UsageError(f"--ecdysis-sim-nonce must be a non-blank text (e.g. --ecdysis-sim-nonce ci), got {value!r}")
    return text


#: `--ecdysis-accept` values (the rules: `pytest_ecdysis/gate/acceptance.py`).
RULES = ("strict", "paired", "sequential")
#: `--ecdysis-accept-method` values.
METHODS = ("sign", "wilcoxon", "bootstrap")
