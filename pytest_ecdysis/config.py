"""Command-line options, their ini mirrors, and the frozen `EcdysisConfig` read at configure time.

Options are declared once here (the README's options table lists them) and read into one frozen object; every value is checked
at configure time and a bad one is a `UsageError` naming the fix. Checks that need other modules
(harness resolution, pre-flight git checks, endpoint reachability) live with those modules and are
called from `plugin.pytest_configure`. This module must not import tau2, task suites or harnesses.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UsageError

SPLITS = ("train", "test", "all")

#: Prefixes of the environment variables the tool, its suites and the openai client read (endpoint, key,
#: model, timeouts, run id...). CI systems export unset secrets as empty strings; for these, empty means unset.
ENV_PREFIXES = ("OPENAI_", "ECDYSIS_")


def unset_empty_env(environ: Any = None) -> list[str]:
    """Remove every `OPENAI_*` / `ECDYSIS_*` variable whose value is empty or blank from `environ` (default
    `os.environ`), so the openai client, xdist workers and validation sub-runs all see it unset (issue 11
    case 6: an empty `OPENAI_BASE_URL` made every call go to the URL ""). Returns the names removed."""
    env = os.environ if environ is None else environ
    empty = sorted(k for k, v in env.items() if k.startswith(ENV_PREFIXES) and not v.strip())
    for name in empty:
        del env[name]
    return empty
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


@dataclass(frozen=True)
class Option:
    name: str  # without the --ecdysis- prefix
    help: str
    default: Any = None
    type: Any = str
    action: str | None = None
    ini: bool = True


OPTIONS: tuple[Option, ...] = (
    Option("model", "task (agent) model; 'sim' or 'sim/<profile>' selects the simulated model "
           "(default: env ECDYSIS_MODEL, else 'sim')"),
    Option("base-url", "OpenAI-compatible endpoint for models that are not 'sim...' "
           "(default: env OPENAI_BASE_URL, else the openai client's default)"),
    Option("user-model", "user-simulator model (default: the task model)"),
    Option("diagnosis-model", "model for the FDCR roles and the built-in editor (default: the task model)"),
    Option("split", "which tasks: train, test or all (default: train)", default="train"),
    Option("tasks", "only these task ids, comma-separated, within the split (default: all)"),
    Option("trials", "trials per task (default: 1)", default="1"),
    Option("test-trials", "trials per task when evolution scores start and frozen harness on test; 0 skips "
           "the test scoring (default: 3)", default="3"),
    Option("threshold", "failure threshold λ on reward, in [0, 1] (default: 1.0)", default="1.0"),
    Option("harness", "harness directory, or a name a suite registers such as 'direct' "
           "(default: example_harness)", default="example_harness"),
    Option("run-dir", "where runs are written (default: .ecdysis/runs)", default=".ecdysis/runs"),
    Option("evolve", "run the evolution loop at session end", default=False, action="store_true", ini=False),
    Option("sandbox", "run harness code under bubblewrap: read-only file system, no network, run directories "
           "and gold data hidden (default: off; needs `bwrap`)", default=False, action="store_true"),
    Option("rounds", "at most R candidate rounds (default: 3)", default="3"),
    Option("strategy", "ecdysis, ecdysis-nofdcr, self-evolution, harnessfix or self-harness (default: ecdysis)",
           default="ecdysis"),
    Option("fdcr-passes", "passes K of Analyst, Critic and Engineer (default: 2)", default="2"),
    Option("editor", "'builtin', 'sim', or 'cmd:<command template>' "
           "(default: 'sim' when the diagnosis model is sim, else 'builtin')"),
    Option("resume", "continue an interrupted evolution run (RUN_ID)", ini=False),
    Option("save-baseline", "write this run's scores as a baseline to FILE", ini=False),
    Option("gate", "compare against a baseline; the verdict is the exit status", default=False,
           action="store_true", ini=False),
    Option("baseline", "the baseline the gate reads (default: .ecdysis/baseline.json)",
           default=".ecdysis/baseline.json"),
    Option("gate-tolerance", "allowed drop of the suite score (default: 0.0)", default="0.0"),
    Option("gate-max-regressions", "allowed number of tasks solved in the baseline and not now "
           "(default: not checked)"),
    Option("accept", "acceptance rule of evolution rounds and of the gate: 'strict' (the suite score strictly "
           "rises / does not drop) or 'paired' (a paired test over tasks at --ecdysis-accept-level) "
           "(default: strict)", default="strict"),
    Option("accept-level", "level α of the paired test, in (0, 1): the chance that a change that does "
           "nothing is accepted (or, with the gate, fails it) (default: 0.05)", default="0.05"),
    Option("rescore", "the incumbent each candidate is compared with: 'auto' (re-run beside the candidate, "
           "unless the model is deterministic: simulated with a fixed nonce), 'always', or 'never' (its "
           "earlier run) (default: auto)", default="auto"),
    Option("response-cache", "evolution: reuse model responses to byte-identical requests of the same task, trial "
           "and role across this run's sub-runs (common random numbers): on or off (default: off; with "
           "--ecdysis-ablate, on for the ablation's re-validations unless set to off)"),
    Option("accept-extra-trials", "paired acceptance: K more trials of each task whose outcome flipped, for "
           "candidate and incumbent, before deciding; the budget is printed (default: 0, off)", default="0"),
    Option("ablate", "evolution: re-validate an accepted candidate of several changes (hunks of its diff) without "
           "each in turn and drop those whose removal loses nothing under --ecdysis-accept (default: off)",
           default=False, action="store_true"),
    Option("cache-dir", "directory of the response cache (default: <run dir>/<run id>/response_cache)"),
    Option("uncacheable", "comma-separated model names or base URLs the response cache never stores "
           "(default: none)"),
    Option("accept-method", "the paired test: sign, wilcoxon or bootstrap (default: sign)", default="sign"),
    Option("concurrency", "trials in flight per worker: each xdist worker (or the single process with -n 0) runs "
           "up to C trials at once in threads, one pytest case per task x trial as without it; -n 2 "
           "--ecdysis-concurrency 32 keeps 64 trials in flight (default: 1)", default="1"),
    Option("sim-latency", "fixed delay in seconds per simulated completion (default: 0)", default="0"),
    Option("sim-nonce", "run nonce of the simulated model's noisy draws; fix it for identical reruns "
           "(default: env ECDYSIS_SIM_NONCE, else fresh per run and validation sub-run)"),
    Option("self-evolution-cap", "specs the self-evolution strategy patches per round, each with an editor call "
           "and a validation sub-run (default: 5)", default="5"),
    Option("proposals", "proposals the self-harness strategy makes per round, each with its own analyst call, "
           "editor call and validation sub-run; the Self-Harness description asks for at least 3, so a value "
           "below 3 runs a reduced Self-Harness (1: a single proposal, no choice among alternatives) "
           "(default: 3)", default="3"),
    Option("evidence", "which failure records diagnosis sees: 'all' or 'failure-aware:N' (default: all)",
           default="all"),
    Option("call-timeout", "seconds one model call of a trial may take, whole response included "
           "(default: env ECDYSIS_CALL_TIMEOUT_S, else 60)"),
    Option("max-retries", "retries of a model call after HTTP 429/5xx, timeouts or refused connections "
           "(default: env ECDYSIS_MAX_RETRIES, else 3)"),
    Option("trial-budget", "total wall-clock seconds of one trial, all calls and retries "
           "(default: env ECDYSIS_TRIAL_BUDGET_S, else 900)"),
    Option("diagnosis-budget", "total seconds of one round's diagnosis, all role calls "
           "(default: env ECDYSIS_DIAGNOSIS_BUDGET_S, else 1800)"),
    Option("editor-budget", "total seconds of one round's edit: the builtin editor's calls or a cmd: editor's "
           "process (default: env ECDYSIS_EDITOR_BUDGET_S, else ECDYSIS_EDITOR_TIMEOUT, else 900)"),
    Option("text-tool-calls", "what a trial does with tool calls the agent's endpoint writes as text (Hermes "
           "<tool_call>, <function=...>, Mistral [TOOL_CALLS]) with tool_calls empty: 'reject' ends the trial as "
           "endpoint_format_error, 'parse' executes them and notes it (default: reject)", default="reject"),
    Option("progress", "seconds between progress lines (done/total trials, elapsed, estimate) while trials "
           "and evolution stages run; 0 turns them off (default: 20)", default="20"),
    Option("test-model", "(repeatable) also score start and frozen harness on test with this model",
           default=None, action="append", ini=False),
    Option("html", "at session end write one self-contained HTML page of the run (and its evolution or gate) "
           "to FILE (default: none; `ecdysis report RUN_DIR` makes it later)", ini=False),
)


def add_options(parser: Any) -> None:
    """Register every option (prefix `--ecdysis-`) and its ini mirror `ecdysis_<name>` on a pytest parser."""
    group = parser.getgroup("ecdysis", "pytest-ecdysis: evolve and gate LLM agent harnesses")
    for opt in OPTIONS:
        dest = "ecdysis_" + opt.name.replace("-", "_")
        kwargs: dict[str, Any] = {"dest": dest, "help": opt.help}
        if opt.action:
            kwargs["action"] = opt.action
            kwargs["default"] = opt.default if opt.action != "append" else None
        else:
            kwargs["default"] = None  # None = not given on the command line; ini/default resolved later
            kwargs["metavar"] = opt.name.split("-")[-1].upper()
        group.addoption("--ecdysis-" + opt.name, **kwargs)
        if opt.ini:
            parser.addini(dest, help=opt.help, default=None)


def is_sim_model(name: str | None) -> bool:
    """True for 'sim' and 'sim/<profile>'."""
    return name is not None and (name == "sim" or name.startswith("sim/"))


@dataclass(frozen=True)
class EcdysisConfig:
    """Every option, resolved and checked. Units: seconds for `sim_latency_s`, `progress_s` and the `*_s`
    limits."""

    model: str
    base_url: str | None
    user_model: str
    diagnosis_model: str
    split: str
    tasks: tuple[str, ...] | None
    trials: int
    test_trials: int
    threshold: float
    harness: str
    run_dir: Path
    evolve: bool
    rounds: int
    strategy: str
    fdcr_passes: int
    editor: str
    resume: str | None
    save_baseline: Path | None
    gate: bool
    baseline: Path
    gate_tolerance: float
    gate_max_regressions: int | None
    accept: str
    accept_level: float
    accept_method: str
    rescore: str
    sim_latency_s: float
    evidence: str
    evidence_limit: int | None
    test_models: tuple[str, ...]
    rootdir: Path
    html: Path | None = None
    sandbox: bool = False
    sim_nonce: str | None = None
    concurrency: int = 1  # trials in flight per worker (`--ecdysis-concurrency`)
    self_evolution_cap: int = 5
    proposals: int = 3  # self-harness proposals per round (`--ecdysis-proposals`)
    text_tool_calls: str = "reject"
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES
    trial_budget_s: float = DEFAULT_TRIAL_BUDGET_S
    diagnosis_budget_s: float = DEFAULT_DIAGNOSIS_BUDGET_S
    editor_budget_s: float = DEFAULT_EDITOR_BUDGET_S
    response_cache: str | None = None  # on, off, or None (not given: off, except for the ablation)
    ablate: bool = False  # `--ecdysis-ablate`
    accept_extra_trials: int = 0  # `--ecdysis-accept-extra-trials`
    cache_dir: Path | None = None
    uncacheable: tuple[str, ...] = ()

    def limits(self) -> dict[str, float | int]:
        """The time limits and retries in force: `{call_timeout_s, max_retries, trial_budget_s,
        diagnosis_budget_s, editor_budget_s}` (printed in the run's summary)."""
        return {field: getattr(self, field) for field, *_ in LIMITS.values()}
    progress_s: float = 20.0

    @property
    def uses_sim(self) -> bool:
        return any(is_sim_model(m) for m in (self.model, self.user_model, self.diagnosis_model, *self.test_models))

    @property
    def fixed_sim_nonce(self) -> str | None:
        """The simulated model's run nonce when fixed (`--ecdysis-sim-nonce`, else env `ECDYSIS_SIM_NONCE`), or
        None: a fresh nonce per run (the sim server's rule, `sim.server.SimModel`)."""
        return self.sim_nonce or os.environ.get("ECDYSIS_SIM_NONCE") or None

    def replace(self, **changes: Any) -> EcdysisConfig:
        return dataclasses.replace(self, **changes)


def _raw(config: Any, opt: Option) -> Any:
    dest = "ecdysis_" + opt.name.replace("-", "_")
    value = config.getoption(dest)
    if opt.action in ("store_true",):
        if not value and opt.ini:
            ini = str(config.getini(dest) or "").strip().lower()
            if ini not in ("", "0", "false", "no", "off", "1", "true", "yes", "on"):
                raise UsageError(f"ini option {dest} must be true or false, got {ini!r}")
            return ini in ("1", "true", "yes", "on")
        return value
    if opt.action == "append":
        return value or []
    if value is None and opt.ini:
        ini = config.getini(dest)
        value = ini if ini not in (None, "", []) else None
    return opt.default if value is None else value


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


def read_config(config: Any) -> EcdysisConfig:
    """Read and check every option of a pytest `Config`.

    Raises:
        UsageError: a value is out of range or inconsistent with another; the message names the fix.
    """
    raw = {opt.name: _raw(config, opt) for opt in OPTIONS}
    env = os.environ
    for name in ("model", "base-url", "user-model", "diagnosis-model", "harness", "run-dir", "tasks"):
        if isinstance(raw[name], str) and not raw[name].strip():  # `--ecdysis-model=` (an unset $MODEL)
            raise UsageError(f"--ecdysis-{name} was given an empty value (an unset shell variable?); pass a "
                             f"value, or leave the option out for its default")
    if any(not str(m).strip() for m in raw["test-model"]):
        raise UsageError("--ecdysis-test-model was given an empty value (an unset shell variable?); pass a "
                         "model name, or leave the option out")
    model = raw["model"] or env.get("ECDYSIS_MODEL") or "sim"
    base_url = raw["base-url"] or env.get("OPENAI_BASE_URL") or None
    user_model = raw["user-model"] or model
    diagnosis_model = raw["diagnosis-model"] or model
    test_models = tuple(raw["test-model"])

    split = _choice("split", raw["split"], SPLITS)
    tasks = None
    if raw["tasks"]:
        tasks = tuple(t.strip() for t in str(raw["tasks"]).split(",") if t.strip())
        if not tasks:
            raise UsageError("--ecdysis-tasks was given but names no task id; pass e.g. --ecdysis-tasks 0,3,7")

    if base_url and not re.match(r"https?://[^/\s]+", base_url):
        raise UsageError(f"--ecdysis-base-url (or OPENAI_BASE_URL) must be an http(s) URL such as "
                         f"http://localhost:8000/v1, got {base_url!r}")
    for option, name in (("--ecdysis-model", model), ("--ecdysis-user-model", user_model),
                         ("--ecdysis-diagnosis-model", diagnosis_model),
                         *(("--ecdysis-test-model", m) for m in test_models)):
        if not is_sim_model(name) and not base_url and not env.get("OPENAI_API_KEY"):
            raise UsageError(
                f"{option} {name!r} is not simulated, and neither --ecdysis-base-url (or OPENAI_BASE_URL) nor "
                "OPENAI_API_KEY is set: point at your endpoint with --ecdysis-base-url URL, export "
                f"OPENAI_API_KEY, or use {option} sim for the simulated model"
            )

    evidence = str(raw["evidence"])
    evidence_limit = None
    if evidence != "all":
        head, _, n = evidence.partition(":")
        if head != "failure-aware" or not n:
            raise UsageError(f"--ecdysis-evidence must be 'all' or 'failure-aware:N', got {evidence!r}")
        if not n.strip().isdigit() or int(n) < 1:
            raise UsageError(f"--ecdysis-evidence failure-aware:N needs N an integer >= 1 (the most records diagnosis sees), "
                             f"got {evidence!r}")
        evidence_limit = int(n)

    editor = raw["editor"] or ("sim" if is_sim_model(diagnosis_model) else "builtin")
    if editor not in ("builtin", "sim") and not editor.startswith("cmd:"):
        raise UsageError(f"--ecdysis-editor must be 'builtin', 'sim' or 'cmd:<command template>', got {editor!r}")
    if editor.startswith("cmd:") and not editor[4:].strip():
        raise UsageError("--ecdysis-editor cmd: needs a command template, e.g. 'cmd:aider --yes {spec}'")

    evolve = bool(raw["evolve"]) or bool(raw["resume"])
    if evolve and split == "test":
        raise UsageError("--ecdysis-evolve cannot use --ecdysis-split test: the test split is held out; "
                         "evolve on train (the default) and the loop scores test at the end")
    if evolve and raw["gate"]:
        raise UsageError("--ecdysis-evolve and --ecdysis-gate are separate jobs; run them in two sessions")

    from .strategies import BUILTIN_STRATEGIES, available_strategies

    strategy = raw["strategy"]
    if strategy not in BUILTIN_STRATEGIES and strategy not in available_strategies():
        raise UsageError(f"--ecdysis-strategy must be one of {', '.join(available_strategies())}, got {strategy!r}")

    from .acceptance import METHODS, RULES

    for name, choices in (("accept", RULES), ("accept-method", METHODS), ("rescore", ("auto", "always", "never"))):
        _choice(name, raw[name], tuple(choices))
    if raw["response-cache"] is not None:  # not given: off, except for the ablation's re-validations
        _choice("response-cache", raw["response-cache"], ("on", "off"))
    accept_level = level("accept-level", raw["accept-level"])

    max_reg = raw["gate-max-regressions"]
    html = Path(raw["html"]) if raw["html"] else None
    if html is not None and html.is_dir():
        raise UsageError(f"--ecdysis-html {html} is a directory; pass the page's file name, e.g. {html / 'report.html'}")
    return EcdysisConfig(
        model=model,
        base_url=base_url,
        user_model=user_model,
        diagnosis_model=diagnosis_model,
        split=split,
        tasks=tasks,
        trials=_int("trials", raw["trials"], 1),
        test_trials=_int("test-trials", raw["test-trials"], 0),
        threshold=_float("threshold", raw["threshold"], 0.0, 1.0),
        harness=str(raw["harness"]),
        run_dir=_anchored(config, "run-dir", raw["run-dir"]),
        evolve=evolve,
        rounds=_int("rounds", raw["rounds"], 1),
        strategy=strategy,
        fdcr_passes=_int("fdcr-passes", raw["fdcr-passes"], 1),
        editor=editor,
        resume=raw["resume"],
        save_baseline=Path(raw["save-baseline"]) if raw["save-baseline"] else None,
        gate=bool(raw["gate"]),
        baseline=_anchored(config, "baseline", raw["baseline"]),
        gate_tolerance=_float("gate-tolerance", raw["gate-tolerance"], 0.0, 1.0),
        gate_max_regressions=None if max_reg in (None, "") else _int("gate-max-regressions", max_reg, 0),
        accept=raw["accept"],
        accept_level=accept_level,
        accept_method=raw["accept-method"],
        rescore=raw["rescore"],
        response_cache=raw["response-cache"],
        ablate=_ablate(config, bool(raw["ablate"]), evolve),
        accept_extra_trials=_extra_trials(raw["accept-extra-trials"], raw["accept"]),
        cache_dir=Path(raw["cache-dir"]) if raw["cache-dir"] else None,
        uncacheable=tuple(x.strip() for x in str(raw["uncacheable"] or "").split(",") if x.strip()),
        sim_latency_s=_float("sim-latency", raw["sim-latency"], 0.0, None),
        evidence=evidence,
        evidence_limit=evidence_limit,
        test_models=test_models,
        rootdir=Path(str(config.rootpath)),
        html=html,
        sandbox=bool(raw["sandbox"]),
        sim_nonce=_nonce(raw["sim-nonce"]),
        concurrency=_int("concurrency", raw["concurrency"], 1),
        self_evolution_cap=_int("self-evolution-cap", raw["self-evolution-cap"], 1),
        proposals=_int("proposals", raw["proposals"], 1),
        text_tool_calls=_choice("text-tool-calls", raw["text-tool-calls"], ("reject", "parse")),
        **read_limits(raw, env),
        progress_s=_float("progress", raw["progress"], 0.0, None),
    )


def _ablate(config: Any, value: bool, evolve: bool) -> bool:
    """`--ecdysis-ablate`: only with `--ecdysis-evolve` when given on the command line (the ini mirror
    `ecdysis_ablate = true` is ignored by sessions that do not evolve, e.g. the gate's).

    Raises:
        UsageError: `--ecdysis-ablate` without `--ecdysis-evolve`.
    """
    if value and not evolve and config.getoption("ecdysis_ablate"):
        raise UsageError("--ecdysis-ablate minimises accepted evolution candidates: it needs --ecdysis-evolve "
                         "(or --ecdysis-resume RUN_ID)")
    return value and evolve


def _extra_trials(value: Any, rule: str) -> int:
    """`--ecdysis-accept-extra-trials K`: an integer >= 0, above 0 only with `--ecdysis-accept paired`.

    Raises:
        UsageError: not an integer >= 0, or K > 0 under `strict` (its verdict is the score, not a test).
    """
    k = _int("accept-extra-trials", value, 0)
    if k and rule != "paired":
        raise UsageError(f"--ecdysis-accept-extra-trials {k} adds trials before a paired test: it needs "
                         "--ecdysis-accept paired (the strict rule compares the two runs' scores as they are)")
    return k


def _nonce(value: Any) -> str | None:
    """`--ecdysis-sim-nonce`: any non-blank text, else None (unset)."""
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        raise UsageError(f"--ecdysis-sim-nonce must be a non-blank text (e.g. --ecdysis-sim-nonce ci), got {value!r}")
    return text
