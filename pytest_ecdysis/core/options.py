"""Command-line options, ini-only settings and removed options, declared once, and each one's raw value.

`OPTIONS` is the one list of `--ecdysis-<name>` options, each in a `GROUPS` group of `pytest --help` (the job
that reads it) and with its ini mirror `ecdysis_<name>`; `INI_ONLY` lists the settings a person rarely sets
for one run (knobs of benchmarks, tests and sub-runs), which are ini keys `ecdysis_<name>` only (`-o` sets one
for one run). A former option of `INI_ONLY` given on the command line is a usage error naming its replacement
(`check_removed`). `LIMIT_KEYS` are the keys of `--ecdysis-limits KEY=VALUE,...`, each also an ini-only
setting. docs/options.md is the table of all of them. `add_options` registers them on pytest's parser; `_raw`
reads one setting's value as given (command line, else ini, else the default), before any check. The checks of
the values are in `config_values`, and `config.read_config` turns the raw values into the frozen
`EcdysisConfig`. This module must not import tau2, task suites or harnesses.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from pytest_ecdysis.core.errors import UsageError

#: `pytest --help` groups, by the job that reads their options: name -> title.
GROUPS: dict[str, str] = {
    "run": "ecdysis run: which tasks, how many trials, where the run is written",
    "endpoint": "ecdysis endpoint: the models and where they are served",
    "evolution": "ecdysis evolution: evolve the harness at session end (--ecdysis-evolve)",
    "acceptance": "ecdysis acceptance: when a candidate (or a gated change) counts as better",
    "budgets": "ecdysis budgets: what an evolution may spend; time limits of calls, trials and harness processes",
    "sandbox": "ecdysis sandbox: containment of harness code and of the editor",
    "gate": "ecdysis gate: compare this run with a baseline (--ecdysis-gate)",
}


@dataclass(frozen=True)
class Option:
    name: str  # without the --ecdysis- prefix
    help: str
    group: str = "run"  #: a `GROUPS` key: the job that reads it (also of an ini-only setting, for the docs)
    default: Any = None
    type: Any = str
    action: str | None = None
    ini: bool = True
    #: the jobs that read it ("evolve", "gate"); given on the command line without any of them it is a usage
    #: error (`config_values.check_needs`), and validation sub-runs never inherit it (`validate.setup.STRIPPED_OPTIONS`).
    needs: tuple[str, ...] = ()
    cli: bool = True  #: False: an ini key only (`INI_ONLY`); its former command-line option is refused
    metavar: str | None = None
    also: str = ""  #: an ini-only setting: what else sets it, named in the removed option's usage error

    @property
    def dest(self) -> str:
        """The ini key (and `config.getoption` name): `ecdysis_<name with underscores>`."""
        return "ecdysis_" + self.name.replace("-", "_")


EVOLVE, GATE, EITHER = ("evolve",), ("gate",), ("evolve", "gate")


OPTIONS: tuple[Option, ...] = (
    # run: which tasks, how many trials, where the run is written
    Option(
        "split",
        "which tasks: train, test or all (default: train)",
        "run",
        default="train",
        metavar="train|test|all",
    ),
    Option(
        "tasks", "only these task ids, comma-separated, within the split (default: all)", "run", metavar="IDS"
    ),
    Option("trials", "trials per task (default: 1)", "run", default="1", metavar="K"),
    Option(
        "trial-offset",
        "the first trial index of each task: trials K..K+N-1 (more trials of tasks already run; the "
        "simulated model draws each index afresh) (default: 0)",
        "run",
        default="0",
        metavar="K",
    ),
    Option(
        "threshold",
        "failure threshold λ on reward, in [0, 1] (default: 1.0)",
        "run",
        default="1.0",
        metavar="λ",
    ),
    Option(
        "harness",
        "harness directory, or a name a suite registers such as 'direct' (default: example_harness)",
        "run",
        default="example_harness",
        metavar="DIR_OR_NAME",
    ),
    Option("run-dir", "where runs are written (default: .ecdysis/runs)", "run", default=".ecdysis/runs"),
    Option(
        "concurrency",
        "'auto': one adaptive limit of model calls in flight for the whole session (workers, validation "
        "sub-runs, roles), grown while replies succeed and halved on HTTP 429/503, honouring Retry-After and "
        "x-ratelimit-* headers; trials start while it has room (up to 16 per worker). C: pins C trials in "
        "flight per worker, each xdist worker (or the single process with -n 0) running up to C trials at "
        "once in threads, one pytest case per task x trial as without it; -n 2 --ecdysis-concurrency 32 "
        "keeps 64 trials in flight (default: auto for a real endpoint, 1 for the simulated model)",
        "run",
        default=None,
        metavar="auto|C",
    ),
    # endpoint: the models and where they are served
    Option(
        "model",
        "task (agent) model; 'sim' or 'sim/<profile>' selects the simulated model "
        "(default: env ECDYSIS_MODEL, else 'sim')",
        "endpoint",
        metavar="NAME",
    ),
    Option(
        "base-url",
        "OpenAI-compatible endpoint for models that are not 'sim...' "
        "(default: env OPENAI_BASE_URL, else the openai client's default)",
        "endpoint",
    ),
    Option("user-model", "user-simulator model (default: the task model)", "endpoint", metavar="NAME"),
    Option(
        "diagnosis-model",
        "model for the FDCR roles and the built-in editor (default: the task model)",
        "endpoint",
        needs=EVOLVE,
        metavar="NAME",
    ),
    Option(
        "sim-latency",
        "fixed delay in seconds per simulated completion (default: 0)",
        "endpoint",
        default="0",
        metavar="SECONDS",
    ),
    Option(
        "max-rps",
        "at most R model calls started per second by the whole session (requests per minute / 60), a "
        "cap for a provider whose limit is known; under pytest-split (the action's shards) each of the "
        "--splits shards gets R / splits (default: no cap)",
        "endpoint",
        metavar="R",
    ),
    Option(
        "max-tpm",
        "at most T tokens per minute for the whole session's model calls (each call's estimate from its "
        "request, corrected by the reply's usage); under pytest-split each shard gets T / splits "
        "(default: no cap)",
        "endpoint",
        metavar="T",
    ),
    Option(
        "preflight",
        "before any trial or role call, send one small request with the suite's tool shape to each "
        "configured model that is not 'sim...' and stop with a usage error naming what to change when "
        "the endpoint refuses it (tools unsupported, model not found, key refused, wrong base URL, content "
        "filter, timeout); 'off' skips it (default: on)",
        "endpoint",
        default="on",
        metavar="on|off",
    ),
    # evolution
    Option(
        "evolve",
        "run the evolution loop at session end (default: off)",
        "evolution",
        default=False,
        action="store_true",
        ini=False,
    ),
    Option(
        "resume",
        "continue the interrupted evolution run RUN_ID (default: none)",
        "evolution",
        ini=False,
        metavar="RUN_ID",
    ),
    Option(
        "rounds",
        "at most R candidate rounds (default: 3)",
        "evolution",
        default="3",
        needs=EVOLVE,
        metavar="R",
    ),
    Option(
        "strategy",
        "ecdysis, ecdysis-nofdcr, self-evolution, harnessfix or self-harness (default: ecdysis)",
        "evolution",
        default="ecdysis",
        needs=EVOLVE,
        metavar="NAME",
    ),
    Option(
        "fdcr-passes",
        "passes K of Analyst, Critic and Engineer (default: 2)",
        "evolution",
        default="2",
        needs=EVOLVE,
        metavar="K",
    ),
    Option(
        "editor",
        "'builtin', 'sim', or 'cmd:<command template>' "
        "(default: 'sim' when the diagnosis model is sim, else 'builtin')",
        "evolution",
        needs=EVOLVE,
        metavar="SPEC",
    ),
    Option(
        "evidence",
        "which failure records diagnosis sees: 'all' or 'failure-aware:N' (default: all)",
        "evolution",
        default="all",
        needs=EVOLVE,
        metavar="all|failure-aware:N",
    ),
    Option(
        "test-trials",
        "trials per task when evolution scores start and frozen harness on test; 0 skips "
        "the test scoring (default: 3)",
        "evolution",
        default="3",
        needs=EVOLVE,
        metavar="K",
    ),
    Option(
        "test-model",
        "(repeatable) also score start and frozen harness on test with this model; the ini "
        "key takes several, comma-separated (default: none)",
        "evolution",
        default=None,
        action="append",
        needs=EVOLVE,
        metavar="MODEL",
    ),
    # acceptance
    Option(
        "accept",
        "acceptance rule of evolution rounds (the gate's is --ecdysis-gate-rule): 'adaptive' (a betting test "
        "on paired trials that adds trials to every task whose outcomes vary, up to ini ecdysis_accept_budget "
        "trials a decision, with a final sign test there), 'sequential' (a first "
        "comparison that may only reject, then confirmation trials of the flipped tasks until a sequential "
        "test decides), 'paired' (a paired test over tasks at the level) or 'strict' (the paper's rule: the "
        "suite score strictly rises / does not drop); tuned by the ini keys ecdysis_accept_level, "
        "ecdysis_accept_budget, ecdysis_accept_method and ecdysis_accept_extra_trials (default: adaptive, "
        "chosen by its measured error rates on real τ² noise: docs/benchmarks.md)",
        "acceptance",
        default="adaptive",
        needs=EVOLVE,
        metavar="RULE",
    ),
    # budgets
    Option(
        "max-cost",
        "evolution: the most USD it may spend (all model calls: trials, diagnosis, editor, test "
        "split, priced from litellm's price map or .ecdysis/prices.json); it stops at the first stage boundary "
        "whose next stage could pass it, state saved, resumable with a higher budget (default: no limit)",
        "budgets",
        needs=EVOLVE,
        metavar="USD",
    ),
    Option(
        "max-tokens",
        "evolution: the most tokens (prompt + completion) it may spend, counted as "
        "--ecdysis-max-cost counts USD (default: no limit)",
        "budgets",
        needs=EVOLVE,
        metavar="TOKENS",
    ),
    Option(
        "limits",
        "time limits and bounds as KEY=VALUE, comma-separated (repeatable): call-timeout (seconds "
        "one model call may take, default 60), max-retries (of a model call after HTTP 429/5xx, timeouts or "
        "refused connections, 3), trial-budget (wall-clock seconds of one trial, 900), diagnosis-budget "
        "(seconds of one round's diagnosis, 1800), editor-budget (seconds of one round's edit, 900), "
        "agent-memory (MB of address space of each harness process, 4096), agent-cpu (CPU seconds of a "
        "trial's harness process, 900; 0: none for both); each key is also the ini key ecdysis_<key> "
        "(default: each key's default, the first five after env ECDYSIS_CALL_TIMEOUT_S, ECDYSIS_MAX_RETRIES, "
        "ECDYSIS_TRIAL_BUDGET_S, ECDYSIS_DIAGNOSIS_BUDGET_S, ECDYSIS_EDITOR_BUDGET_S)",
        "budgets",
        action="append",
        ini=False,
        metavar="KEY=VALUE,...",
    ),
    # sandbox
    Option(
        "sandbox",
        "auto, on or off: run harness code under bubblewrap (read-only, allowlisted file system, no "
        "network, own PID namespace, run directories, caches and gold data hidden); auto: wherever bwrap can "
        "start here, else said in one line; on: a usage error where it cannot (install: apt-get install "
        "bubblewrap) (default: auto)",
        "sandbox",
        default="auto",
        metavar="auto|on|off",
    ),
    Option(
        "editor-writable",
        "directories a cmd: editor may write besides the candidate's worktree when it runs "
        "in the sandbox (its own state, e.g. ~/.aider), comma-separated; everything else of the disk is "
        "read-only to it (default: env ECDYSIS_EDITOR_WRITABLE, else none)",
        "sandbox",
        needs=EVOLVE,
        metavar="DIRS",
    ),
    Option(
        "editor-readable",
        "files and directories a cmd: editor may read when it runs in the sandbox (its config and its "
        "credentials for its model, e.g. ~/.aider.conf.yml), comma-separated; it sees only the candidate's "
        "worktree, what its command runs, the system directories and what is named here and with "
        "--ecdysis-editor-writable (default: env ECDYSIS_EDITOR_READABLE, else none)",
        "sandbox",
        needs=EVOLVE,
        metavar="PATHS",
    ),
    # gate
    Option(
        "gate",
        "compare against a baseline; the verdict is the exit status (default: off)",
        "gate",
        default=False,
        action="store_true",
        ini=False,
    ),
    Option(
        "baseline",
        "the baseline the gate reads (default: .ecdysis/baseline.json)",
        "gate",
        default=".ecdysis/baseline.json",
        needs=GATE,
        metavar="FILE",
    ),
    Option(
        "save-baseline",
        "write this run's scores as a baseline to FILE (default: none)",
        "gate",
        ini=False,
        metavar="FILE",
    ),
    Option(
        "gate-rule",
        "the gate's rule: 'noninferiority' (pass when the data show the suite score dropped by less than "
        "--ecdysis-gate-margin, fail when they show a drop beyond it, and in between 'undecided': the trials "
        "per task that would decide are said, and it fails unless --ecdysis-gate-pass-undecided), 'strict' "
        "(fail on a score drop beyond --ecdysis-gate-tolerance) or 'paired' (fail on a significant paired drop "
        "beyond the tolerance); --ecdysis-accept is the evolution's rule, not the gate's "
        "(default: noninferiority)",
        "gate",
        default="noninferiority",
        needs=GATE,
        metavar="RULE",
    ),
    Option(
        "gate-margin",
        "noninferiority: the tolerated drop of the suite score, as a rate share in [0, 1) "
        "(0.05 = 5 points) (default: 0.05)",
        "gate",
        default="0.05",
        needs=GATE,
        metavar="M",
    ),
    Option(
        "gate-pass-undecided",
        "noninferiority: pass an undecided verdict (neither shown within the margin nor shown beyond "
        "it) instead of failing it (default: off, an undecided change was not shown safe)",
        "gate",
        default=False,
        action="store_true",
        needs=GATE,
    ),
    Option(
        "gate-tolerance",
        "strict and paired gate rules: allowed drop of the suite score (default: 0.0)",
        "gate",
        default="0.0",
        needs=GATE,
        metavar="X",
    ),
    Option(
        "gate-max-regressions",
        "allowed number of tasks solved in the baseline and not now (default: not checked)",
        "gate",
        needs=GATE,
        metavar="N",
    ),
)

#: The keys of `--ecdysis-limits` (each also an ini-only setting below; the env fallbacks and defaults are
#: `config_values.LIMITS` and `config_values.AGENT_LIMITS`).
LIMIT_KEYS = (
    "call-timeout",
    "max-retries",
    "trial-budget",
    "diagnosis-budget",
    "editor-budget",
    "agent-memory",
    "agent-cpu",
)

_INI = "(ini key only; -o sets it for one run)"

#: Settings that are ini keys only (they were command-line options): knobs of benchmarks, tests, sub-runs,
#: and of a project rather than of one run.
INI_ONLY: tuple[Option, ...] = (
    Option(
        "progress",
        "seconds between progress lines (done/total trials, elapsed, estimate) while trials "
        "and evolution stages run; 0 turns them off (default: 20)",
        "run",
        default="20",
        cli=False,
    ),
    Option(
        "html",
        "at session end write one self-contained HTML page of the run (and its evolution or gate) "
        "to FILE (default: none)",
        "run",
        cli=False,
        also="or write the page after the run with `ecdysis report RUN_DIR -o FILE`",
    ),
    Option(
        "text-tool-calls",
        "what a trial does with tool calls the agent's endpoint writes as text (Hermes "
        "<tool_call>, <function=...>, Mistral [TOOL_CALLS]) with tool_calls empty: 'reject' ends the trial as "
        "endpoint_format_error, 'parse' executes them and notes it (default: reject)",
        "endpoint",
        default="reject",
        cli=False,
    ),
    Option(
        "sim-nonce",
        "run nonce of the simulated model's noisy draws; fix it for identical reruns "
        "(default: env ECDYSIS_SIM_NONCE, else fresh per run and validation sub-run)",
        "endpoint",
        cli=False,
        also="or set the environment variable ECDYSIS_SIM_NONCE",
    ),
    Option(
        "self-evolution-cap",
        "specs the self-evolution strategy patches per round, each with an editor call "
        "and a validation sub-run (default: 5)",
        "evolution",
        default="5",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "proposals",
        "proposals the self-harness strategy makes per round, each with its own analyst call, "
        "editor call and validation sub-run; the Self-Harness description asks for at least 3, so a value "
        "below 3 runs a reduced Self-Harness (1: a single proposal, no choice among alternatives) "
        "(default: 3)",
        "evolution",
        default="3",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "editor-context",
        "context window in tokens of the model the built-in editor calls: its prompt (the "
        "spec, the files the spec names in full, the other harness files by name) is fitted to it, files that "
        "do not fit are listed instead; 0: no limit (default: 0)",
        "evolution",
        default="0",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "response-cache",
        "evolution: reuse model responses to byte-identical requests of the same task, "
        "trial and role across this run's sub-runs (common random numbers): on or off (default: off; with "
        "ecdysis_ablate, on for the ablation's re-validations unless set to off)",
        "evolution",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "cache-dir",
        "directory of the response cache (default: <run dir>/<run id>/response_cache)",
        "evolution",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "uncacheable",
        "comma-separated model names or base URLs the response cache never stores (default: none)",
        "evolution",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "ablate",
        "evolution: re-validate an accepted candidate of several changes (hunks of its diff) without "
        "each in turn and drop those whose removal loses nothing under --ecdysis-accept (default: false)",
        "evolution",
        default=False,
        action="store_true",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "heldout",
        "evolution: score a candidate the train decision accepted, beside its incumbent, on the test split "
        "(--ecdysis-test-trials trials a task) and refuse it when its train gain exceeds its held-out gain "
        "beyond the noise of both: 'refuse' or 'off' (default: refuse)",
        "acceptance",
        default="refuse",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "rescore",
        "the incumbent each candidate is compared with: 'auto' (re-run beside the candidate, "
        "unless the model is deterministic: simulated with a fixed nonce), 'always', or 'never' (its "
        "earlier run) (default: auto)",
        "acceptance",
        default="auto",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "accept-level",
        "level α of the paired and sequential tests, in (0, 1): the chance that a change that "
        "does nothing is accepted (or, with the gate, fails it) (default: 0.05)",
        "acceptance",
        default="0.05",
        needs=EITHER,
        cli=False,
    ),
    Option(
        "accept-method",
        "the paired test: sign, wilcoxon or bootstrap (default: sign)",
        "acceptance",
        default="sign",
        needs=EITHER,
        cli=False,
    ),
    Option(
        "accept-budget",
        "adaptive acceptance: trials per decision, both harnesses, the starting comparison included; "
        "fixed before the first trial (default: 0, meaning 20 per task, at most 1,200)",
        "acceptance",
        default="0",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "accept-extra-trials",
        "paired acceptance: K more trials of each task whose outcome flipped, for "
        "candidate and incumbent, before deciding; the budget is printed. sequential: at most K confirmation "
        "looks (default: 0, off; under sequential 0 means 3 looks)",
        "acceptance",
        default="0",
        needs=EVOLVE,
        cli=False,
    ),
    Option(
        "gate-max-cost-rise",
        "fail the gate when the agent's tokens per task rise above the baseline's by "
        "more than this share, e.g. 0.1: at most 10 percent more (default: not checked)",
        "gate",
        needs=GATE,
        cli=False,
    ),
    Option(
        "call-timeout",
        "seconds one model call of a trial may take, whole response included "
        "(default: env ECDYSIS_CALL_TIMEOUT_S, else 60)",
        "budgets",
        cli=False,
    ),
    Option(
        "max-retries",
        "retries of a model call after HTTP 429/5xx, timeouts or refused connections "
        "(default: env ECDYSIS_MAX_RETRIES, else 3)",
        "budgets",
        cli=False,
    ),
    Option(
        "trial-budget",
        "total wall-clock seconds of one trial, all calls and retries "
        "(default: env ECDYSIS_TRIAL_BUDGET_S, else 900)",
        "budgets",
        cli=False,
    ),
    Option(
        "diagnosis-budget",
        "total seconds of one round's diagnosis, all role calls "
        "(default: env ECDYSIS_DIAGNOSIS_BUDGET_S, else 1800)",
        "budgets",
        cli=False,
    ),
    Option(
        "editor-budget",
        "total seconds of one round's edit: the builtin editor's calls or a cmd: editor's "
        "process (default: env ECDYSIS_EDITOR_BUDGET_S, else ECDYSIS_EDITOR_TIMEOUT, else 900)",
        "budgets",
        cli=False,
    ),
    Option(
        "agent-memory",
        "address space in MB of each harness process (RLIMIT_AS); past it an allocation "
        "fails and the trial ends agent_error naming the limit; 0: none (default: 4096)",
        "budgets",
        cli=False,
    ),
    Option(
        "agent-cpu",
        "CPU seconds of each trial's harness process (RLIMIT_CPU); past it the process is "
        "ended and the trial ends agent_error naming the limit; 0: none (default: 900)",
        "budgets",
        cli=False,
    ),
)

#: Every setting `read_config` reads: the command-line options and the ini-only settings.
SETTINGS: tuple[Option, ...] = OPTIONS + INI_ONLY


def removed_message(opt: Option) -> str:
    """The usage error of a former command-line option (`INI_ONLY`): what sets it now."""
    key, value = opt.dest, "true" if opt.action == "store_true" else "VALUE"
    if opt.name in LIMIT_KEYS:
        how = (
            f"pass --ecdysis-limits {opt.name}=VALUE (several keys comma-separated), or set the ini key {key}"
        )
    else:
        how = f"set the ini key {key} (in the ini file, or -o {key}={value} for one run)"
    env = opt.help.rpartition("(default: env ")[2].split(",")[0] if "(default: env " in opt.help else ""
    tail = f", {opt.also}" if opt.also else f", or the environment variable {env}" if env else ""
    return f"--ecdysis-{opt.name} was removed: {how}{tail}"


def given_on_command_line(args: list[str] | tuple[str, ...], opt: Option) -> bool:
    """True when `args` (pytest's `config.invocation_params.args`) give `--ecdysis-<name>`, as `--opt V` or
    `--opt=V` (not the ini file, not `PYTEST_ADDOPTS`)."""
    flag = "--ecdysis-" + opt.name
    return any(str(a) == flag or str(a).startswith(flag + "=") for a in args)


def add_options(parser: Any) -> None:
    """Register every option (prefix `--ecdysis-`) in its `GROUPS` group with its ini mirror `ecdysis_<name>`,
    every ini-only setting, and each former option of those hidden (`check_removed` refuses it)."""
    groups = {name: parser.getgroup("ecdysis-" + name, title) for name, title in GROUPS.items()}
    for opt in OPTIONS:
        kwargs: dict[str, Any] = {"dest": opt.dest, "help": opt.help}
        if opt.action:
            kwargs["action"] = opt.action
            kwargs["default"] = opt.default if opt.action != "append" else None
        else:
            kwargs["default"] = None  # None = not given on the command line; ini/default resolved later
        if opt.action != "store_true":
            kwargs["metavar"] = opt.metavar or opt.name.split("-")[-1].upper()
        groups[opt.group].addoption("--ecdysis-" + opt.name, **kwargs)
    for opt in SETTINGS:
        if opt.ini:
            parser.addini(opt.dest, help=opt.help if opt.cli else f"{opt.help} {_INI}", default=None)
    for opt in INI_ONLY:  # hidden: given, it is a usage error naming the replacement
        flag = {"action": "store_true", "default": False} if opt.action == "store_true" else {"default": None}
        groups[opt.group].addoption(
            "--ecdysis-" + opt.name, dest="ecdysis_removed_" + opt.dest[8:], help=argparse.SUPPRESS, **flag
        )


def check_removed(config: Any) -> None:
    """A former command-line option (now an ini-only setting) given: a `UsageError` naming its replacement.

    Raises:
        UsageError: e.g. "--ecdysis-sim-nonce was removed: set the ini key ecdysis_sim_nonce (...), or set the
            environment variable ECDYSIS_SIM_NONCE".
    """
    given = [
        opt
        for opt in INI_ONLY
        if config.getoption("ecdysis_removed_" + opt.dest[8:], None) not in (None, False)
    ]
    if given:
        raise UsageError("; ".join(removed_message(opt) for opt in given))


def _raw(config: Any, opt: Option) -> Any:
    dest = opt.dest
    value = config.getoption(dest) if opt.cli else None
    if opt.action in ("store_true",):
        if not value and opt.ini:
            ini = str(config.getini(dest) or "").strip().lower()
            if ini not in ("", "0", "false", "no", "off", "1", "true", "yes", "on"):
                raise UsageError(f"ini option {dest} must be true or false, got {ini!r}")
            return ini in ("1", "true", "yes", "on")
        return bool(value)
    if opt.action == "append":
        if value or not opt.ini:
            return value or []
        ini = str(config.getini(dest) or "")
        return [part.strip() for part in ini.replace("\n", ",").split(",") if part.strip()]
    if value is None and opt.ini:
        ini = config.getini(dest)
        value = ini if ini not in (None, "", []) else None
    return opt.default if value is None else value
