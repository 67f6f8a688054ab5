"""The frozen `EcdysisConfig`: every option read and checked at configure time.

The options and ini-only settings are declared once in `options` (docs/options.md lists them) and each kind of value
is checked in `config_values`; `read_config` reads them into one frozen object, checks the values that
depend on each other, and a bad value is a `UsageError` naming the fix. Checks that need other modules
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

from pytest_ecdysis.core.config_values import (
    AGENT_LIMITS,
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_DIAGNOSIS_BUDGET_S,
    DEFAULT_EDITOR_BUDGET_S,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TRIAL_BUDGET_S,
    LIMITS,
    _ablate,
    _accept_budget,
    _anchored,
    _choice,
    _extra_trials,
    _float,
    _int,
    _nonce,
    check_needs,
    concurrency,
    level,
    parse_limits,
    rate_caps,
    read_limits,
)
from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.core.options import LIMIT_KEYS, SETTINGS, _raw, check_removed

SPLITS = ("train", "test", "all")

#: Prefixes of the environment variables the tool, its suites and the openai client read (endpoint, key,
#: model, timeouts, run id...). CI systems export unset secrets as empty strings; for these, empty means unset.
ENV_PREFIXES = ("OPENAI_", "ECDYSIS_")


def unset_empty_env(environ: Any = None) -> list[str]:
    """Remove every `OPENAI_*` / `ECDYSIS_*` variable whose value is empty or blank from `environ` (default
    `os.environ`), so the openai client, xdist workers and validation sub-runs all see it unset (an
    empty `OPENAI_BASE_URL` made every call go to the URL ""). Returns the names removed."""
    env = os.environ if environ is None else environ
    empty = sorted(k for k, v in env.items() if k.startswith(ENV_PREFIXES) and not v.strip())
    for name in empty:
        del env[name]
    return empty


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
    sandbox: str = "auto"  # `--ecdysis-sandbox`: auto, on or off
    agent_memory_mb: int = 4096  # `--ecdysis-limits agent-memory=MB`
    agent_cpu_s: int = 900  # `--ecdysis-limits agent-cpu=S`
    sim_nonce: str | None = None
    concurrency: int = 1  # trials in flight per worker (`--ecdysis-concurrency`; auto: `AUTO_TRIALS`)
    concurrency_auto: bool = False  # `--ecdysis-concurrency auto`: the session's adaptive limiter
    max_rps: float | None = None  # `--ecdysis-max-rps`, this shard's share
    max_tpm: float | None = None  # `--ecdysis-max-tpm`, this shard's share
    self_evolution_cap: int = 5
    proposals: int = 3  # self-harness proposals per round (ini `ecdysis_proposals`)
    text_tool_calls: str = "reject"
    preflight: str = "on"  # `--ecdysis-preflight`: on or off (`endpoint.preflight`)
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES
    trial_budget_s: float = DEFAULT_TRIAL_BUDGET_S
    diagnosis_budget_s: float = DEFAULT_DIAGNOSIS_BUDGET_S
    editor_budget_s: float = DEFAULT_EDITOR_BUDGET_S
    editor_context_tokens: int = 0  # ini `ecdysis_editor_context`: 0 = no limit
    editor_writable: tuple[str, ...] = ()  # `--ecdysis-editor-writable`: absolute paths
    editor_readable: tuple[str, ...] = ()  # `--ecdysis-editor-readable`: absolute paths
    response_cache: str | None = None  # on, off, or None (not given: off, except for the ablation)
    ablate: bool = False  # ini `ecdysis_ablate`
    heldout: str = "refuse"  # ini `ecdysis_heldout`: refuse or off (`evolve.heldout`)
    accept_extra_trials: int = 0  # ini `ecdysis_accept_extra_trials`
    accept_budget: int = 0  # ini `ecdysis_accept_budget`: adaptive trials per decision, 0 = the default
    trial_offset: int = 0  # `--ecdysis-trial-offset`: the first trial index of each task
    cache_dir: Path | None = None
    uncacheable: tuple[str, ...] = ()
    max_cost_usd: float | None = None  # `--ecdysis-max-cost`: None = no limit
    max_tokens: int | None = None  # `--ecdysis-max-tokens`: None = no limit
    gate_max_cost_rise: float | None = None  # ini `ecdysis_gate_max_cost_rise`: a share, None = not checked
    gate_rule: str = "noninferiority"  # `--ecdysis-gate-rule`: noninferiority, strict or paired
    gate_margin: float = 0.05  # `--ecdysis-gate-margin`: noninferiority's tolerated drop, a rate share
    gate_pass_undecided: bool = False  # `--ecdysis-gate-pass-undecided`: an undecided verdict passes

    def limits(self) -> dict[str, float | int]:
        """The time limits and retries in force: `{call_timeout_s, max_retries, trial_budget_s,
        diagnosis_budget_s, editor_budget_s}` (printed in the run's summary)."""
        return {field: getattr(self, field) for field, *_ in LIMITS.values()}

    progress_s: float = 20.0

    @property
    def uses_sim(self) -> bool:
        return any(
            is_sim_model(m) for m in (self.model, self.user_model, self.diagnosis_model, *self.test_models)
        )

    @property
    def fixed_sim_nonce(self) -> str | None:
        """The simulated model's run nonce when fixed (ini `ecdysis_sim_nonce`, else env `ECDYSIS_SIM_NONCE`), or
        None: a fresh nonce per run (the sim server's rule, `sim.model.SimModel`)."""
        return self.sim_nonce or os.environ.get("ECDYSIS_SIM_NONCE") or None

    def replace(self, **changes: Any) -> EcdysisConfig:
        return dataclasses.replace(self, **changes)


def _budgets(raw: dict[str, Any]) -> dict[str, Any]:
    """`max_cost_usd`, `max_tokens` and `gate_max_cost_rise` of `--ecdysis-max-cost`, `--ecdysis-max-tokens` and
    the ini key `ecdysis_gate_max_cost_rise` (None when not given).

    Raises:
        UsageError: not a number, negative, or (tokens) not a whole number.
    """
    out: dict[str, Any] = {"max_cost_usd": None, "max_tokens": None, "gate_max_cost_rise": None}
    if raw.get("gate-max-cost-rise") not in (None, ""):
        out["gate_max_cost_rise"] = _float("gate-max-cost-rise", raw["gate-max-cost-rise"], 0.0, None)
    if raw.get("max-cost") not in (None, ""):
        out["max_cost_usd"] = _float("max-cost", raw["max-cost"], 0.0, None)
    if raw.get("max-tokens") not in (None, ""):
        out["max_tokens"] = _int("max-tokens", str(raw["max-tokens"]).replace("_", ""), 0)
    return out


def read_config(config: Any) -> EcdysisConfig:
    """Read and check every option and ini-only setting of a pytest `Config`.

    Raises:
        UsageError: a removed option was given, or a value is out of range or inconsistent with another; the
            message names the fix.
    """
    check_removed(config)
    raw = {opt.name: _raw(config, opt) for opt in SETTINGS}
    limits = parse_limits(raw["limits"])  # `--ecdysis-limits` keys over the ini keys
    limits = {key: limits.get(key, raw[key]) for key in LIMIT_KEYS}
    env = os.environ
    agent = read_limits(limits, env, AGENT_LIMITS)  # the harness process's bounds
    for name in (
        "model",
        "base-url",
        "user-model",
        "diagnosis-model",
        "harness",
        "run-dir",
        "tasks",
        "resume",
        "save-baseline",
        "baseline",
    ):
        if isinstance(raw[name], str) and not raw[name].strip():  # `--ecdysis-model=` (an unset $MODEL)
            raise UsageError(
                f"--ecdysis-{name} was given an empty value (an unset shell variable?); pass a "
                f"value, or leave the option out for its default"
            )
    if any(not str(m).strip() for m in raw["test-model"]):
        raise UsageError(
            "--ecdysis-test-model was given an empty value (an unset shell variable?); pass a "
            "model name, or leave the option out"
        )
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
            raise UsageError(
                "--ecdysis-tasks was given but names no task id; pass e.g. --ecdysis-tasks 0,3,7"
            )

    if base_url and not re.match(r"https?://[^/\s]+", base_url):
        raise UsageError(
            f"--ecdysis-base-url (or OPENAI_BASE_URL) must be an http(s) URL such as "
            f"http://localhost:8000/v1, got {base_url!r}"
        )
    for option, name in (
        ("--ecdysis-model", model),
        ("--ecdysis-user-model", user_model),
        ("--ecdysis-diagnosis-model", diagnosis_model),
        *(("--ecdysis-test-model", m) for m in test_models),
    ):
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
            raise UsageError(
                f"--ecdysis-evidence failure-aware:N needs N an integer >= 1 (the most records diagnosis sees), "
                f"got {evidence!r}"
            )
        evidence_limit = int(n)

    editor = raw["editor"] or ("sim" if is_sim_model(diagnosis_model) else "builtin")
    if editor not in ("builtin", "sim") and not editor.startswith("cmd:"):
        raise UsageError(
            f"--ecdysis-editor must be 'builtin', 'sim' or 'cmd:<command template>', got {editor!r}"
        )
    if editor.startswith("cmd:") and not editor[4:].strip():
        raise UsageError("--ecdysis-editor cmd: needs a command template, e.g. 'cmd:aider --yes {spec}'")

    evolve = bool(raw["evolve"]) or bool(raw["resume"])
    if evolve and split == "test":
        raise UsageError(
            "--ecdysis-evolve cannot use --ecdysis-split test: the test split is held out; "
            "evolve on train (the default) and the loop scores test at the end"
        )
    if evolve and raw["gate"]:
        raise UsageError("--ecdysis-evolve and --ecdysis-gate are separate jobs; run them in two sessions")
    from pytest_ecdysis.core.config_values import GATE_RULES, gate_margin
    from pytest_ecdysis.core.options import OPTIONS, given_on_command_line

    accept_opt = next(o for o in OPTIONS if o.name == "accept")
    invoked = tuple(getattr(getattr(config, "invocation_params", None), "args", ()) or ())
    if raw["gate"] and given_on_command_line(invoked, accept_opt):
        raise UsageError(
            "--ecdysis-accept is the evolution's acceptance rule, not the gate's: choose the gate's rule with "
            f"--ecdysis-gate-rule, one of {', '.join(GATE_RULES)} (default noninferiority; strict and paired "
            "are the former gate rules, with --ecdysis-gate-tolerance)"
        )
    gate_rule = _choice("gate-rule", str(raw["gate-rule"]).strip().lower(), GATE_RULES)
    margin = gate_margin("gate-margin", raw["gate-margin"])

    from pytest_ecdysis.core.registry import BUILTIN_STRATEGIES, available_strategies

    strategy = raw["strategy"]
    if strategy not in BUILTIN_STRATEGIES and strategy not in available_strategies():
        raise UsageError(
            f"--ecdysis-strategy must be one of {', '.join(available_strategies())}, got {strategy!r}"
        )

    from pytest_ecdysis.core.config_values import METHODS, RULES

    for name, choices in (
        ("accept", RULES),
        ("accept-method", METHODS),
        ("rescore", ("auto", "always", "never")),
        ("heldout", ("refuse", "off")),
    ):
        _choice(name, raw[name], tuple(choices))
    if raw["response-cache"] is not None:  # not given: off, except for the ablation's re-validations
        _choice("response-cache", raw["response-cache"], ("on", "off"))
    accept_level = level("accept-level", raw["accept-level"])

    if raw["save-baseline"] and Path(raw["save-baseline"]).is_dir():
        raise UsageError(
            f"--ecdysis-save-baseline {raw['save-baseline']} is a directory; pass the baseline's file "
            f"name, e.g. {Path(raw['save-baseline']) / 'baseline.json'}"
        )
    max_reg = raw["gate-max-regressions"]
    html = Path(raw["html"]) if raw["html"] else None
    if html is not None and html.is_dir():
        raise UsageError(
            f"ini key ecdysis_html: {html} is a directory; pass the page's file name, e.g. "
            f"{html / 'report.html'}"
        )
    cfg = EcdysisConfig(
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
        gate_rule=gate_rule,
        gate_margin=margin,
        gate_pass_undecided=bool(raw["gate-pass-undecided"]),
        gate_max_regressions=None if max_reg in (None, "") else _int("gate-max-regressions", max_reg, 0),
        accept=raw["accept"],
        accept_level=accept_level,
        accept_method=raw["accept-method"],
        rescore=raw["rescore"],
        response_cache=raw["response-cache"],
        ablate=_ablate(bool(raw["ablate"]), evolve),
        heldout=raw["heldout"],
        accept_extra_trials=_extra_trials(
            raw["accept-extra-trials"], raw["accept"], decides=evolve or bool(raw["gate"])
        ),
        accept_budget=_accept_budget(
            raw["accept-budget"], raw["accept"], decides=evolve or bool(raw["gate"])
        ),
        trial_offset=_int("trial-offset", raw["trial-offset"], 0),
        cache_dir=Path(raw["cache-dir"]) if raw["cache-dir"] else None,
        uncacheable=tuple(x.strip() for x in str(raw["uncacheable"] or "").split(",") if x.strip()),
        sim_latency_s=_float("sim-latency", raw["sim-latency"], 0.0, None),
        evidence=evidence,
        evidence_limit=evidence_limit,
        test_models=test_models,
        rootdir=Path(str(config.rootpath)),
        html=html,
        sandbox=_choice("sandbox", str(raw["sandbox"]).strip().lower(), ("auto", "on", "off")),
        agent_memory_mb=int(agent["agent_memory_mb"]),
        agent_cpu_s=int(agent["agent_cpu_s"]),
        sim_nonce=_nonce(raw["sim-nonce"]),
        **concurrency(raw["concurrency"], uses_real=not (is_sim_model(model) and is_sim_model(user_model))),
        **rate_caps(raw["max-rps"], raw["max-tpm"], _splits(config)),
        self_evolution_cap=_int("self-evolution-cap", raw["self-evolution-cap"], 1),
        proposals=_int("proposals", raw["proposals"], 1),
        text_tool_calls=_choice("text-tool-calls", raw["text-tool-calls"], ("reject", "parse")),
        preflight=_choice("preflight", str(raw["preflight"]).strip().lower(), ("on", "off")),
        editor_context_tokens=_int("editor-context", raw["editor-context"], 0),
        editor_writable=_writable(raw["editor-writable"]),
        editor_readable=_readable(raw["editor-readable"]),
        **read_limits(limits, env),
        **_budgets(raw),
        progress_s=_float("progress", raw["progress"], 0.0, None),
    )
    check_needs(config, evolve, cfg.gate)  # after the values' own checks: a bad value is named first
    return cfg


def _splits(config: Any) -> int:
    """pytest-split's `--splits N` (the action's shards), 1 without it."""
    try:
        value = config.getoption("splits")
    except (ValueError, AttributeError):
        return 1
    try:
        return max(int(value or 1), 1)
    except (TypeError, ValueError):
        return 1


def _writable(value: Any) -> tuple[str, ...]:
    """`--ecdysis-editor-writable`: comma-separated directories, `~` expanded, each an existing directory
    outside every git directory.

    Raises:
        UsageError: a path that is not an existing directory (it would be created by the sandbox as root's),
            or one inside a repository's git directory (its object store, refs and config are never the
            editor's to write: `edit.contain`).
    """
    out = []
    for part in str(value or "").split(","):
        if not part.strip():
            continue
        path = Path(part.strip()).expanduser().absolute()
        if not path.is_dir():
            raise UsageError(
                f"--ecdysis-editor-writable: {path} is not an existing directory; create it first "
                "or leave it out"
            )
        inside = next(
            (
                p
                for p in (path, *path.parents)
                if p.name == ".git" or (p / "HEAD").is_file() and (p / "objects").is_dir()
            ),
            None,
        )
        if inside is not None:
            raise UsageError(
                f"--ecdysis-editor-writable: {path} lies inside the git directory {inside}; an editor never "
                "writes a repository's git directory (its objects are imported after the call); leave it out"
            )
        out.append(str(path))
    return tuple(out)


def _readable(value: Any) -> tuple[str, ...]:
    """`--ecdysis-editor-readable`: comma-separated paths, `~` expanded, each existing.

    Raises:
        UsageError: a path that does not exist.
    """
    out = []
    for part in str(value or "").split(","):
        if not part.strip():
            continue
        path = Path(part.strip()).expanduser().absolute()
        if not path.exists():
            raise UsageError(f"--ecdysis-editor-readable: {path} does not exist; leave it out or create it")
        out.append(str(path))
    return tuple(out)
