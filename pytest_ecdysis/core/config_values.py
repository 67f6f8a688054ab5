"""The checks of option values, one function a kind of value, and the model-call limits.

Each check takes the setting's name (without `--ecdysis-`) and its raw value (`options._raw`) and returns
the value to keep, or raises one `UsageError` that names the option (or, for an ini-only setting, its ini key:
`flag`) and the value it wants.
`config.read_config` calls them; `cli` reuses them for the `ecdysis` command's flags. The time limits and
retries of model calls (`LIMITS`) and the harness process's bounds (`AGENT_LIMITS`) are the keys of
`--ecdysis-limits` and ini keys; the former also have environment fallbacks, read here (`read_limits`) for
pytest sessions and runs outside pytest alike. This module must not import tau2, task
suites or harnesses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypedDict

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.core.options import INI_ONLY, LIMIT_KEYS

#: Time limits (seconds) and retries of model calls; each is a key of `--ecdysis-limits`, an ini key and has an
#: env fallback.
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
    "diagnosis-budget": (
        "diagnosis_budget_s",
        ("ECDYSIS_DIAGNOSIS_BUDGET_S",),
        DEFAULT_DIAGNOSIS_BUDGET_S,
        "seconds",
    ),
    "editor-budget": (
        "editor_budget_s",
        ("ECDYSIS_EDITOR_BUDGET_S", "ECDYSIS_EDITOR_TIMEOUT"),
        DEFAULT_EDITOR_BUDGET_S,
        "seconds",
    ),
}
#: The bounds of each harness process (`validate.limits`), keys of `--ecdysis-limits` and ini keys, as `LIMITS`
#: (no env fallback: the controller passes them on in ECDYSIS_AGENT_MEMORY_MB and ECDYSIS_AGENT_CPU_S).
AGENT_LIMITS: dict[str, tuple[str, tuple[str, ...], float, str]] = {
    "agent-memory": ("agent_memory_mb", (), 4096, "int"),
    "agent-cpu": ("agent_cpu_s", (), 900, "int"),
}
assert set(LIMITS) | set(AGENT_LIMITS) == set(LIMIT_KEYS)

_INI_ONLY = frozenset(o.name for o in INI_ONLY)


def flag(name: str) -> str:
    """How a message names a setting: `--ecdysis-<name>`, or `ini key ecdysis_<name>` for an ini-only one."""
    return f"ini key ecdysis_{name.replace('-', '_')}" if name in _INI_ONLY else f"--ecdysis-{name}"


def parse_limits(values: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`--ecdysis-limits KEY=VALUE,...` (each given value; a later key wins) as `{key: value}`, unchecked.

    Raises:
        UsageError: a part without `=`, or a key that is not one of `options.LIMIT_KEYS`.
    """
    out: dict[str, str] = {}
    for value in values:
        for part in str(value).split(","):
            if not part.strip():
                continue
            key, eq, text = part.partition("=")
            key = key.strip()
            if not eq or key not in LIMIT_KEYS:
                raise UsageError(
                    f"--ecdysis-limits takes KEY=VALUE pairs, comma-separated, with KEY one of "
                    f"{', '.join(LIMIT_KEYS)} (e.g. --ecdysis-limits call-timeout=120,max-retries=5), "
                    f"got {part.strip()!r}"
                )
            out[key] = text.strip()
    return out


def _int(name: str, value: Any, minimum: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{flag(name)} must be an integer >= {minimum}, got {value!r}") from None
    if number < minimum:
        raise UsageError(f"{flag(name)} must be an integer >= {minimum}, got {number}")
    return number


def _float(name: str, value: Any, lo: float, hi: float | None) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{flag(name)} must be a number, got {value!r}") from None
    if not (number >= lo and (hi is None or number <= hi)):  # NaN fails both comparisons
        span = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise UsageError(f"{flag(name)} must be {span}, got {number}")
    return number


def level(name: str, value: Any) -> float:
    """A test's level (ini `ecdysis_accept_level`): a number in the open interval (0, 1); one message for any
    other value (a bound in [0, 1] was said to be allowed, then refused)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not 0.0 < number < 1.0:  # NaN fails the comparison
        raise UsageError(
            f"{flag(name)} must be a number strictly between 0 and 1 (e.g. 0.05), got "
            f"{value if number is None else number!r}"
        )
    return number


#: trial threads per worker under `--ecdysis-concurrency auto` (the limiter decides the calls in flight).
AUTO_TRIALS = 16


def concurrency(value: Any, uses_real: bool) -> dict[str, Any]:
    """`--ecdysis-concurrency`: `auto` (the default when the agent or user model is a real endpoint) or an
    integer >= 1 (the default 1 for the simulated model) -> the config's `concurrency`, `concurrency_auto`.

    Raises:
        UsageError: anything else, naming both forms.
    """
    text = "auto" if value is None and uses_real else ("1" if value is None else str(value).strip().lower())
    if text == "auto":
        return {"concurrency": AUTO_TRIALS, "concurrency_auto": True}
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise UsageError(
            f"--ecdysis-concurrency must be 'auto' (an adaptive limit for the whole session) or an integer "
            f">= 1 (trials in flight per worker), got {value!r}"
        )
    return {"concurrency": number, "concurrency_auto": False}


def rate_caps(rps: Any, tpm: Any, splits: int = 1) -> dict[str, Any]:
    """`--ecdysis-max-rps R`, `--ecdysis-max-tpm T` -> `max_rps`, `max_tpm` of this shard: each of `splits`
    shards (pytest-split's `--splits`) gets cap / splits.

    Raises:
        UsageError: a value that is not a number > 0.
    """
    out: dict[str, Any] = {}
    for name, value, what in (("max-rps", rps, "requests per second"), ("max-tpm", tpm, "tokens per minute")):
        if value is None or str(value).strip() == "":
            out[name.replace("-", "_")] = None
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float("nan")
        if not number > 0 or number == float("inf"):
            raise UsageError(
                f"{flag(name)} must be a number > 0 ({what} for the whole session), got {value!r}; leave it "
                "out for no cap"
            )
        out[name.replace("-", "_")] = number / max(splits, 1)
    return out


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise UsageError(f"{flag(name)} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _limit(name: str, value: Any, source: str) -> float | int:
    _, _, _, kind = {**LIMITS, **AGENT_LIMITS}[name]
    where = f" (from {source})" if source.startswith("env") else ""
    try:
        number = int(value) if kind == "int" else float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or (kind == "int" and number < 0) or (kind == "seconds" and not number > 0):
        want = "an integer >= 0" if kind == "int" else "a number of seconds > 0"
        raise UsageError(
            f"--ecdysis-limits {name} must be {want}, got {value!r}{where}; set it with "
            f"--ecdysis-limits {name}=VALUE (or the ini key ecdysis_{name.replace('-', '_')})"
        )
    return number


def read_limits(raw: dict[str, Any], env: Any = None, table: dict[str, Any] | None = None) -> dict[str, Any]:
    """The time limits and retries (`table`, default `LIMITS`; `AGENT_LIMITS` for the harness process's
    bounds): `--ecdysis-limits` key, else ini key (both in `raw`, by key), else env fallback, else default.

    Returns `{config field: value}` (an int for an `"int"` kind, a float of seconds otherwise; the keys are
    the table's, so the mapping is typed by field name only where it is read). Raises UsageError for a zero or negative budget or timeout, retries
    below 0, or a value that is not a number (the message names where it came from).
    """
    env = os.environ if env is None else env
    out: dict[str, Any] = {}
    for name, (field, env_names, default, _) in (LIMITS if table is None else table).items():
        value, source = raw.get(name), f"--ecdysis-limits {name}"
        for env_name in env_names:
            if value is None and env.get(env_name) not in (None, ""):
                value, source = env[env_name], f"env {env_name}"
        out[field] = _limit(name, default if value is None else value, source)
    return out


class EndpointLimits(TypedDict):
    """The limits of one endpoint client: seconds per call, retries per call, seconds per trial."""

    call_timeout_s: float
    max_retries: int
    trial_budget_s: float


def endpoint_limits_from_env() -> EndpointLimits:
    """`{call_timeout_s, max_retries, trial_budget_s}` from the env fallbacks (for runs outside pytest)."""
    limits = read_limits({})
    return {
        "call_timeout_s": float(limits["call_timeout_s"]),
        "max_retries": int(limits["max_retries"]),
        "trial_budget_s": float(limits["trial_budget_s"]),
    }


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
    from pytest_ecdysis.core.options import OPTIONS, given_on_command_line  # OPTIONS: command-line ones only

    args = tuple(getattr(getattr(config, "invocation_params", None), "args", ()) or ())
    jobs = {"evolve": evolve, "gate": gate}
    idle = [
        o for o in OPTIONS if o.needs and not any(jobs[j] for j in o.needs) and given_on_command_line(args, o)
    ]
    if not idle:
        return
    job = {"evolve": "an evolution", "gate": "the gate"}
    job_flag = {"evolve": "--ecdysis-evolve (or --ecdysis-resume RUN_ID)", "gate": "--ecdysis-gate"}
    lines = [
        f"--ecdysis-{o.name} is read only by {' or '.join(job[j] for j in o.needs)}: it needs "
        f"{' or '.join(job_flag[j] for j in o.needs)}"
        for o in idle
    ]
    keys = ", ".join("ecdysis_" + o.name.replace("-", "_") for o in idle if o.ini)
    keep = f", or keep the setting in the ini file ({keys}), which other sessions ignore" if keys else ""
    raise UsageError(
        "; ".join(lines) + f". Without it the option would be silently ignored: drop it, add the job{keep}"
    )


def _ablate(value: bool, evolve: bool) -> bool:
    """Ini `ecdysis_ablate`: on only in an evolution (`ecdysis_ablate = true` is ignored by sessions that do
    not evolve)."""
    return value and evolve


def _extra_trials(value: Any, rule: str, decides: bool = True) -> int:
    """Ini `ecdysis_accept_extra_trials = K`: an integer >= 0, above 0 only with `--ecdysis-accept paired` (K more
    trials of the flipped tasks) or `sequential` (at most K confirmation looks; 0: `evolve.confirm.DEFAULT_LOOKS`).
    The rule is checked only in a session that decides (`decides`: an evolution or a gate): a validation
    sub-run never gets the outer `--ecdysis-accept` (`validate.setup.STRIPPED_OPTIONS`) and would read the ini
    file's rule instead.

    Raises:
        UsageError: not an integer >= 0, or K > 0 under `strict` (its verdict is the score, not a test).
    """
    k = _int("accept-extra-trials", value, 0)
    if k and decides and rule not in ("paired", "sequential"):
        raise UsageError(
            f"ini key ecdysis_accept_extra_trials = {k} adds trials before a paired test: it needs "
            f"--ecdysis-accept paired or sequential (the {rule} rule "
            + (
                "compares the two runs' scores as they are)"
                if rule == "strict"
                else "adds its own trials up to ini ecdysis_accept_budget)"
            )
        )
    return k


def _accept_budget(value: Any, rule: str, decides: bool = True) -> int:
    """Ini `ecdysis_accept_budget = N`: trials per decision of the `adaptive` rule (both harnesses, the
    starting comparison included); 0 (the default) is `gate.adaptive.default_budget` of the suite's tasks.

    Raises:
        UsageError: not an integer >= 0, a value 1 (a decision needs a trial of each harness), or N > 0
            under another rule (only `adaptive` spends trials up to a budget).
    """
    n = _int("accept-budget", str(value).replace("_", ""), 0)
    if n == 1:
        raise UsageError(
            "ini key ecdysis_accept_budget must be 0 (the default budget) or at least 2 trials (one of "
            "each harness), got 1"
        )
    if n and decides and rule != "adaptive":  # a sub-run never gets the outer rule (as `_extra_trials`)
        raise UsageError(
            f"ini key ecdysis_accept_budget = {n} is the adaptive rule's trials per decision: it needs "
            f"--ecdysis-accept adaptive (the {rule} rule does not spend up to a budget)"
        )
    return n


def _nonce(value: Any) -> str | None:
    """Ini `ecdysis_sim_nonce`: any non-blank text, else None (unset)."""
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        raise UsageError(
            f"ini key ecdysis_sim_nonce must be a non-blank text (e.g. ecdysis_sim_nonce = ci), got {value!r}"
        )
    return text


#: `--ecdysis-accept` values (the rules: `pytest_ecdysis/gate/acceptance.py`).
RULES = ("strict", "paired", "sequential", "adaptive")
#: `--ecdysis-gate-rule` values (`pytest_ecdysis/gate/baseline.py`, `verdict`).
GATE_RULES = ("noninferiority", "strict", "paired")


def gate_margin(name: str, value: Any) -> float:
    """The non-inferiority margin (`--ecdysis-gate-margin`, `ecdysis gate --margin`): a rate share in [0, 1).

    Raises:
        UsageError: not a number, below 0 or 1 and above (a drop of the whole rate cannot be tolerated).
    """
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not 0.0 <= number < 1.0:  # NaN fails the comparison
        raise UsageError(
            f"{flag(name)} must be a rate share in [0, 1), e.g. 0.05 for 5 points, got "
            f"{value if number is None else number!r}"
        )
    return number


#: ini `ecdysis_accept_method` values.
METHODS = ("sign", "wilcoxon", "bootstrap")
