"""Command-line options and their ini mirrors, declared once, and each one's raw value.

`OPTIONS` is the one list of `--ecdysis-<name>` options (the README's options table lists them);
`add_options` registers each with its ini mirror `ecdysis_<name>` on pytest's parser; `_raw` reads one
option's value as given (command line, else ini, else the option's default), before any check. The checks
of the values are in `config_values`, and `config.read_config` turns the raw values into the frozen
`EcdysisConfig`. This module must not import tau2, task suites or harnesses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_ecdysis.core.errors import UsageError


@dataclass(frozen=True)
class Option:
    name: str  # without the --ecdysis- prefix
    help: str
    default: Any = None
    type: Any = str
    action: str | None = None
    ini: bool = True
    #: the jobs that read it ("evolve", "gate"); given on the command line without any of them it is a usage
    #: error (`config_values.check_needs`), and validation sub-runs never inherit it (`subrun_setup`).
    needs: tuple[str, ...] = ()


EVOLVE, GATE, EITHER = ("evolve",), ("gate",), ("evolve", "gate")


OPTIONS: tuple[Option, ...] = (
    Option("model", "task (agent) model; 'sim' or 'sim/<profile>' selects the simulated model "
           "(default: env ECDYSIS_MODEL, else 'sim')"),
    Option("base-url", "OpenAI-compatible endpoint for models that are not 'sim...' "
           "(default: env OPENAI_BASE_URL, else the openai client's default)"),
    Option("user-model", "user-simulator model (default: the task model)"),
    Option("diagnosis-model", "model for the FDCR roles and the built-in editor (default: the task model)", needs=EVOLVE),
    Option("split", "which tasks: train, test or all (default: train)", default="train"),
    Option("tasks", "only these task ids, comma-separated, within the split (default: all)"),
    Option("trials", "trials per task (default: 1)", default="1"),
    Option("test-trials", "trials per task when evolution scores start and frozen harness on test; 0 skips "
           "the test scoring (default: 3)", default="3", needs=EVOLVE),
    Option("threshold", "failure threshold λ on reward, in [0, 1] (default: 1.0)", default="1.0"),
    Option("harness", "harness directory, or a name a suite registers such as 'direct' "
           "(default: example_harness)", default="example_harness"),
    Option("run-dir", "where runs are written (default: .ecdysis/runs)", default=".ecdysis/runs"),
    Option("evolve", "run the evolution loop at session end", default=False, action="store_true", ini=False),
    Option("sandbox", "auto, on or off: run harness code under bubblewrap (read-only, allowlisted file system, no network, "
           "own PID namespace, run directories, caches and gold data hidden); auto: wherever bwrap can start "
           "here, else said in one line; on: a usage error where it cannot (install: apt-get install "
           "bubblewrap) (default: auto)", default="auto"),
    Option("rounds", "at most R candidate rounds (default: 3)", default="3", needs=EVOLVE),
    Option("strategy", "ecdysis, ecdysis-nofdcr, self-evolution, harnessfix or self-harness (default: ecdysis)",
           default="ecdysis", needs=EVOLVE),
    Option("fdcr-passes", "passes K of Analyst, Critic and Engineer (default: 2)", default="2", needs=EVOLVE),
    Option("editor", "'builtin', 'sim', or 'cmd:<command template>' "
           "(default: 'sim' when the diagnosis model is sim, else 'builtin')", needs=EVOLVE),
    Option("resume", "continue an interrupted evolution run (RUN_ID)", ini=False),
    Option("save-baseline", "write this run's scores as a baseline to FILE", ini=False),
    Option("gate", "compare against a baseline; the verdict is the exit status", default=False,
           action="store_true", ini=False),
    Option("baseline", "the baseline the gate reads (default: .ecdysis/baseline.json)",
           default=".ecdysis/baseline.json", needs=GATE),
    Option("gate-tolerance", "allowed drop of the suite score (default: 0.0)", default="0.0", needs=GATE),
    Option("gate-max-regressions", "allowed number of tasks solved in the baseline and not now "
           "(default: not checked)", needs=GATE),
    Option("accept", "acceptance rule of evolution rounds and of the gate: 'sequential' (a first comparison that "
           "may only reject, then confirmation trials until a sequential test at --ecdysis-accept-level decides; "
           "the gate judges it as 'paired'), 'paired' (a paired test over tasks at --ecdysis-accept-level) or "
           "'strict' (the paper's rule: the suite score strictly rises / does not drop) (default: sequential, "
           "chosen by measured error rates: docs/benchmarks.md)", default="sequential", needs=EITHER),
    Option("accept-level", "level α of the paired test, in (0, 1): the chance that a change that does "
           "nothing is accepted (or, with the gate, fails it) (default: 0.05)", default="0.05", needs=EITHER),
    Option("rescore", "the incumbent each candidate is compared with: 'auto' (re-run beside the candidate, "
           "unless the model is deterministic: simulated with a fixed nonce), 'always', or 'never' (its "
           "earlier run) (default: auto)", default="auto", needs=EVOLVE),
    Option("response-cache", "evolution: reuse model responses to byte-identical requests of the same task, trial "
           "and role across this run's sub-runs (common random numbers): on or off (default: off; with "
           "--ecdysis-ablate, on for the ablation's re-validations unless set to off)", needs=EVOLVE),
    Option("accept-extra-trials", "paired acceptance: K more trials of each task whose outcome flipped, for "
           "candidate and incumbent, before deciding; the budget is printed. sequential: at most K confirmation "
           "looks (default: 0, off; under sequential 0 means 3 looks)", default="0", needs=EVOLVE),
    Option("ablate", "evolution: re-validate an accepted candidate of several changes (hunks of its diff) without "
           "each in turn and drop those whose removal loses nothing under --ecdysis-accept (default: off)",
           default=False, action="store_true", needs=EVOLVE),
    Option("cache-dir", "directory of the response cache (default: <run dir>/<run id>/response_cache)", needs=EVOLVE),
    Option("uncacheable", "comma-separated model names or base URLs the response cache never stores "
           "(default: none)", needs=EVOLVE),
    Option("accept-method", "the paired test: sign, wilcoxon or bootstrap (default: sign)", default="sign", needs=EITHER),
    Option("concurrency", "trials in flight per worker: each xdist worker (or the single process with -n 0) runs "
           "up to C trials at once in threads, one pytest case per task x trial as without it; -n 2 "
           "--ecdysis-concurrency 32 keeps 64 trials in flight (default: 1)", default="1"),
    Option("sim-latency", "fixed delay in seconds per simulated completion (default: 0)", default="0"),
    Option("sim-nonce", "run nonce of the simulated model's noisy draws; fix it for identical reruns "
           "(default: env ECDYSIS_SIM_NONCE, else fresh per run and validation sub-run)"),
    Option("self-evolution-cap", "specs the self-evolution strategy patches per round, each with an editor call "
           "and a validation sub-run (default: 5)", default="5", needs=EVOLVE),
    Option("proposals", "proposals the self-harness strategy makes per round, each with its own analyst call, "
           "editor call and validation sub-run; the Self-Harness description asks for at least 3, so a value "
           "below 3 runs a reduced Self-Harness (1: a single proposal, no choice among alternatives) "
           "(default: 3)", default="3", needs=EVOLVE),
    Option("evidence", "which failure records diagnosis sees: 'all' or 'failure-aware:N' (default: all)",
           default="all", needs=EVOLVE),
    Option("call-timeout", "seconds one model call of a trial may take, whole response included "
           "(default: env ECDYSIS_CALL_TIMEOUT_S, else 60)"),
    Option("max-retries", "retries of a model call after HTTP 429/5xx, timeouts or refused connections "
           "(default: env ECDYSIS_MAX_RETRIES, else 3)"),
    Option("trial-budget", "total wall-clock seconds of one trial, all calls and retries "
           "(default: env ECDYSIS_TRIAL_BUDGET_S, else 900)"),
    Option("diagnosis-budget", "total seconds of one round's diagnosis, all role calls "
           "(default: env ECDYSIS_DIAGNOSIS_BUDGET_S, else 1800)", needs=EVOLVE),
    Option("editor-budget", "total seconds of one round's edit: the builtin editor's calls or a cmd: editor's "
           "process (default: env ECDYSIS_EDITOR_BUDGET_S, else ECDYSIS_EDITOR_TIMEOUT, else 900)", needs=EVOLVE),
    Option("editor-writable", "directories a cmd: editor may write besides the candidate's worktree when it runs "
           "in the sandbox (its own state, e.g. ~/.aider), comma-separated; everything else of the disk is read-only "
           "to it (default: env ECDYSIS_EDITOR_WRITABLE, else none)", needs=EVOLVE),
    Option("editor-context", "context window in tokens of the model the built-in editor calls: its prompt (the "
           "spec, the files the spec names in full, the other harness files by name) is fitted to it, files that do "
           "not fit are listed instead; 0: no limit (default: 0)", default="0", needs=EVOLVE),
    Option("text-tool-calls", "what a trial does with tool calls the agent's endpoint writes as text (Hermes "
           "<tool_call>, <function=...>, Mistral [TOOL_CALLS]) with tool_calls empty: 'reject' ends the trial as "
           "endpoint_format_error, 'parse' executes them and notes it (default: reject)", default="reject"),
    Option("progress", "seconds between progress lines (done/total trials, elapsed, estimate) while trials "
           "and evolution stages run; 0 turns them off (default: 20)", default="20"),
    Option("test-model", "(repeatable) also score start and frozen harness on test with this model",
           default=None, action="append", ini=False, needs=EVOLVE),
    Option("agent-memory", "address space in MB of each harness process (RLIMIT_AS); past it an allocation "
           "fails and the trial ends agent_error naming the limit; 0: none (default: 4096)", default="4096"),
    Option("agent-cpu", "CPU seconds of each trial's harness process (RLIMIT_CPU); past it the process is "
           "ended and the trial ends agent_error naming the limit; 0: none (default: 900)", default="900"),
    Option("html", "at session end write one self-contained HTML page of the run (and its evolution or gate) "
           "to FILE (default: none; `ecdysis report RUN_DIR` makes it later)", ini=False),
    Option("gate-max-cost-rise", "fail the gate when the agent's tokens per task rise above the baseline's by more "
           "than this share, e.g. 0.1: at most 10 percent more (default: not checked)", needs=GATE),
    Option("max-cost", "evolution: the most USD it may spend (all model calls: trials, diagnosis, editor, test "
           "split, priced from litellm's price map or .ecdysis/prices.json); it stops at the first stage boundary "
           "whose next stage could pass it, state saved, resumable with a higher budget (default: no limit)",
           needs=EVOLVE),
    Option("max-tokens", "evolution: the most tokens (prompt + completion) it may spend, counted as --ecdysis-max-cost "
           "counts USD (default: no limit)", needs=EVOLVE),
)


def given_on_command_line(args: list[str] | tuple[str, ...], opt: Option) -> bool:
    """True when `args` (pytest's `config.invocation_params.args`) give `--ecdysis-<name>`, as `--opt V` or
    `--opt=V` (not the ini file, not `PYTEST_ADDOPTS`)."""
    flag = "--ecdysis-" + opt.name
    return any(str(a) == flag or str(a).startswith(flag + "=") for a in args)


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
