"""Baselines and the regression gate.

`--ecdysis-save-baseline FILE` writes a run's scores (`save_baseline`); `--ecdysis-gate` compares a run
with the baseline at `--ecdysis-baseline` (`verdict`). The gate fails when

- the run is not comparable: nothing collected, cases that never reported, infrastructure errors
  (xdist can print "no tests ran" and exit 0: the gate checks coverage itself);
- `--ecdysis-gate-rule noninferiority` (the default; `noninferiority.noninferiority`): the data do not show
  the drop within `--ecdysis-gate-margin` (5 points by default): a drop beyond it is shown (`fail`), or
  neither is (`undecided`: fails unless `--ecdysis-gate-pass-undecided`; the verdict says how many trials
  per task would decide), at the one-sided level ini `ecdysis_accept_level`;
  `--ecdysis-gate-rule strict`: the suite score is below the baseline's by more than
  `--ecdysis-gate-tolerance`; `--ecdysis-gate-rule paired`: a one-sided paired test over tasks
  (`acceptance.regression_test`, ini `ecdysis_accept_method`) finds the run worse than the baseline at the
  level ini `ecdysis_accept_level` *and* the mean per-task drop exceeds the tolerance (it passes unless a
  drop is proven: measured, a real 8-point regression passes it);
- more than `--ecdysis-gate-max-regressions` tasks solved in the baseline are not solved now (only when
  that option is given); "solved" = every trial of the task succeeded;
- ini `ecdysis_gate_max_cost_rise = S` (a share, only when given): the agent's tokens per task (its tokens over
  the tasks, as the evolution's test split reports efficiency) rose above the baseline's by more than S
  (`cost_rise`); a baseline saved before it kept tokens per task cannot be checked and fails with that reason.

A baseline of another suite, split, trial count, model, λ or task selection is refused, not compared, as
a usage error before any trial: at configure time (`preflight`) for what the options tell, right after
collection (`refusal`, called by `selection.check_collected`) for the collected suites and tasks. Only for
tests whose suite does not tell its tasks does the refusal wait for the end of the run (`verdict`).
It passes otherwise, even with trials below λ. No pytest here; the plugin maps the verdict to the exit
status (0 pass, 1 fail, 4 refused: a usage error like the early refusals); `ecdysis gate` exits the same
(and 4 for a missing or unreadable baseline, as `pytest --ecdysis-gate` does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import RunDirError, UsageError, shown
from pytest_ecdysis.core.records import SCHEMA_VERSION
from pytest_ecdysis.gate.acceptance import regression_test, sign_min_wins
from pytest_ecdysis.gate.cost_rise import cost_rise, tokens_per_task
from pytest_ecdysis.gate.noninferiority import DEFAULT_MARGIN, noninferiority, pilot_rates, smallest_drop

#: the gate's rules (`--ecdysis-gate-rule`, `ecdysis gate --rule`); the first is the default.
RULES = ("noninferiority", "strict", "paired")

#: fields of a baseline that must equal the run's for a comparison to mean anything.
MATCH_FIELDS = ("suite", "split", "trials", "model", "threshold", "sim_nonce")
#: of those, fields an older baseline may lack: compared only when the baseline has them. `sim_nonce`
#: (the simulated model's fixed run nonce, None for a fresh one per run) is written for sim runs only.
OPTIONAL_FIELDS = ("sim_nonce",)
#: how a mismatch names a field whose name alone does not say what to change.
FIELD_NAMES = {"sim_nonce": "simulated model's nonce (ecdysis_sim_nonce or ECDYSIS_SIM_NONCE)"}


def baseline_from_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The baseline document for a run summary (what `--ecdysis-save-baseline` writes).

    Shape: `{schema_version, suite, split, trials, model, threshold, [sim_nonce,] harness_id, run_id,
    suite_score, pass_hat_k, n_tasks, tokens_per_task, tasks: {"<suite>/<task_id>": {"n", "successes", "solved",
    "mean_reward"}}}` (`tokens_per_task`: `tokens_per_task(summary)`); `sim_nonce` only when the summary has it (a simulated model: its fixed nonce or None).
    """
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "ecdysis-baseline",
        **{
            k: summary.get(k)
            for k in (*MATCH_FIELDS, "harness_id", "run_id", "suite_score", "pass_hat_k", "n_tasks")
            if k in summary or k not in OPTIONAL_FIELDS
        },
        "tokens_per_task": tokens_per_task(summary),
        "tasks": {
            k: {
                "n": v["n"],
                "successes": v["successes"],
                "solved": v["solved"],
                "mean_reward": v.get("mean_reward"),
                **({"failure": v["failure"]} if v.get("failure") else {}),
            }
            for k, v in summary.get("tasks", {}).items()
        },
    }


def incomplete(summary: dict[str, Any]) -> str | None:
    """Why a run's summary cannot be a baseline (None when it can): a missing case, a case pytest did not
    run, an infrastructure error or no trial at all would make the baseline's score a partial one."""
    parts = [
        f"{len(summary.get(k) or [])} {what}"
        for k, what in (("missing", "missing case(s)"), ("not_run", "case(s) not run"))
        if summary.get(k)
    ]
    if summary.get("n_infra_errors"):
        parts.append(f"{summary['n_infra_errors']} infrastructure error(s)")
    if not summary.get("n_trials"):
        parts.append("no trial")
    return ", ".join(parts) or None


def save_baseline(summary: dict[str, Any], path: Path) -> Path:
    """Write the baseline of `summary` to `path` (parents created). Raises RunDirError if not writable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(baseline_from_summary(summary), indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise RunDirError(
            f"cannot write the baseline to {path}: {exc.strerror or exc}; "
            "pass a writable --ecdysis-save-baseline FILE"
        ) from None
    return path


def load_baseline(
    path: Path, *, who: str = "--ecdysis-gate", option: str = "--ecdysis-baseline"
) -> dict[str, Any]:
    """Read a baseline file. Raises UsageError naming the file and how to make one.

    `who` and `option` name the caller and its option for the baseline file in the message: the pytest
    gate's (the defaults) or `ecdysis gate`'s (`"ecdysis gate"`, `"--baseline"`).
    """
    if not path.is_file():
        raise UsageError(
            f"{who}: no baseline at {path}; create one with a pytest run on the target branch "
            f"and --ecdysis-save-baseline {path}, or point {option} at it"
        )
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or "suite_score" not in data or "tasks" not in data:
            raise ValueError("missing suite_score or tasks")
        if data.get("kind") != "ecdysis-baseline":  # e.g. a run's summary.json: it has both fields
            raise ValueError(
                f"its kind is {data.get('kind')!r}, not 'ecdysis-baseline'; a run directory's "
                "summary.json becomes a baseline through `ecdysis baseline RUN_DIR -o FILE`"
            )
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{who}: baseline {path} is not a pytest-ecdysis baseline ({exc}); write it again "
            f"with a pytest run and --ecdysis-save-baseline, or point {option} at another file"
        ) from None
    return data


def mismatches(
    baseline: dict[str, Any], run: dict[str, Any], fields: tuple[str, ...] = MATCH_FIELDS
) -> list[str]:
    """Human-readable differences of the fields that must match (empty when comparable). A field of
    `OPTIONAL_FIELDS` is compared only when both sides have it (a baseline written before it was recorded
    is accepted)."""
    out = []
    for name in fields:
        if name in OPTIONAL_FIELDS and name not in baseline:
            continue
        if name in run and baseline.get(name) != run.get(name):
            b, r = baseline.get(name), run.get(name)
            if name == "sim_nonce":
                b, r = (repr(x) if x is not None else "none (a fresh nonce per run)" for x in (b, r))
                out.append(f"{FIELD_NAMES[name]}: baseline {b}, this run {r}")
            else:
                out.append(f"{FIELD_NAMES.get(name, name)}: baseline {b!r}, this run {r!r}")
    return out


def preflight(cfg: EcdysisConfig) -> None:
    """Configure-time check of `--ecdysis-gate`: the baseline exists and matches split, trials, model, λ and,
    for a simulated model, the nonce (when the baseline records it).

    Raises:
        UsageError: missing or unreadable baseline, or one made with other options.
    """
    from pytest_ecdysis.core.config import is_sim_model

    baseline = load_baseline(cfg.baseline)
    run = {"split": cfg.split, "trials": cfg.trials, "model": cfg.model, "threshold": cfg.threshold}
    if is_sim_model(cfg.model):
        run["sim_nonce"] = cfg.fixed_sim_nonce
    diff = mismatches(baseline, run)
    if diff:
        raise UsageError(
            f"--ecdysis-gate refuses baseline {cfg.baseline}: it was made with other options "
            f"({'; '.join(diff)}); scores are only comparable for the same suite, split, trials, "
            "model, λ (threshold) and simulated model's nonce. Run with those options, or save a "
            "new baseline."
        )


@dataclass
class GateVerdict:
    """The gate's decision. `reasons` say why it failed (empty when it passed)."""

    passed: bool
    score: float | None
    baseline_score: float | None
    tolerance: float
    regressions: list[str] = field(default_factory=list)
    max_regressions: int | None = None
    reasons: list[str] = field(default_factory=list)
    refused: bool = False
    baseline_path: str = ""
    #: `noninferiority` (the drop shown within the margin), `strict` (score drop beyond the tolerance) or
    #: `paired` (a significant drop beyond the tolerance)
    rule: str = "noninferiority"
    test: dict[str, Any] | None = None  #: the paired test: method, effect, interval, p_value, level, ...
    cost: dict[str, Any] | None = None  #: `cost_rise` figures with ini `ecdysis_gate_max_cost_rise`
    margin: float = DEFAULT_MARGIN  #: noninferiority: the tolerated drop, a rate share
    pass_undecided: bool = False  #: noninferiority: an undecided verdict passes
    #: noninferiority's figures: state, effect, se, lower, upper, margin, level, n_tasks, trials,
    #: trials_to_decide, catches (the smallest drop failed with 80% probability at these trials)
    ni: dict[str, Any] | None = None

    @property
    def state(self) -> str:
        """`pass`, `fail`, `undecided` (noninferiority's third state, whether it passed or not) or
        `refused`."""
        if self.refused:
            return "refused"
        if self.ni is not None and self.ni["state"] == "undecided" and self.passed == self.pass_undecided:
            return "undecided"
        return "pass" if self.passed else "fail"

    @property
    def delta(self) -> float | None:
        if self.score is None or self.baseline_score is None:
            return None
        return self.score - self.baseline_score

    def headline(self) -> str:
        """One line: PASSED/FAILED, the score against the baseline and by how much."""
        word = "PASSED" if self.passed else ("REFUSED" if self.refused else "FAILED")
        if self.delta is None or self.refused:
            return f"gate {word}: " + "; ".join(self.reasons or ["no score"])
        if self.rule == "noninferiority":
            return self._ni_headline(word)
        margin = self.delta + self.tolerance
        how = (
            ""
            if self.rule == "paired"
            else f"{margin:.3f} above the lowest allowed score"
            if self.passed
            else f"{-margin:.3f} below the lowest allowed score"
            if margin < 0
            else ""
        )
        line = (
            f"gate {word}: suite score {self.score:.3f} vs baseline {self.baseline_score:.3f} "
            f"({self.delta:+.3f}, tolerance {self.tolerance:.3f}{'; ' + how if how else ''})"
        )
        if self.test:
            t = self.test
            iv = t.get("interval")
            line += (
                f"; {'paired' if self.rule == 'paired' else 'for information'}: {t['method']} test of a "
                f"drop over {t['n_tasks']} task(s): effect {t['effect']:+.3f}"
                + (f" [{iv[0]:+.3f}, {iv[1]:+.3f}]" if iv else "")
                + f", p={t['p_value']:.3g}"
                + (f" (level {t['level']:g})" if self.rule == "paired" else "")
            )
        return line + self._tail()

    def _ni_headline(self, word: str) -> str:
        """`gate FAILED: suite score 0.675 vs baseline 0.700 (-0.025); rule noninferiority, margin 5 points:
        Δ -0.025, one-sided 95% bounds [-0.069, +0.019]: undecided, about 13 trials per task would decide it
        (now 4), which fails; catches a drop of 2.3 points or more (80%) at 4 trial(s) per task over 40
        task(s)` (tests/test_gate_noninferiority.py), then the regressions and cost parts."""
        assert self.score is not None and self.baseline_score is not None and self.delta is not None
        line = (
            f"gate {word}: suite score {self.score:.3f} vs baseline {self.baseline_score:.3f} "
            f"({self.delta:+.3f}); rule noninferiority, margin {100 * self.margin:g} points"
        )
        ni = self.ni
        if ni is None:
            return line + ": no task was scored in both the baseline and the run"
        line += (
            f": Δ {ni['effect']:+.3f}, one-sided {100 * (1 - ni['level']):g}% bounds "
            f"[{ni['lower']:+.3f}, {ni['upper']:+.3f}]: {ni['state']}"
        )
        if ni["state"] == "undecided":
            line += (
                f", about {ni['trials_to_decide']} trials per task would decide it (now {ni['trials']})"
                if ni["trials_to_decide"]
                else ", no trial count decides it at this estimate (Δ is the margin)"
            )
            line += ", passed by pass-undecided" if self.pass_undecided else ", which fails"
        catches = ni["catches_shown"] if self.pass_undecided else ni["catches"]
        where = f"at {ni['trials']} trial(s) per task over {ni['n_tasks']} task(s)"
        line += (
            f"; catches a drop of {100 * catches:.1f} points or more (80%) {where}"
            if catches > 0
            else f"; {where} it fails an unchanged harness too (80%): too few trials for this margin"
        )
        return line + self._tail()

    def _tail(self) -> str:
        line = ""
        if self.max_regressions is not None or self.regressions:
            limit = "not checked" if self.max_regressions is None else f"at most {self.max_regressions}"
            line += f"; {len(self.regressions)} regressed task(s), {limit}"
        if self.cost and self.cost.get("rise") is not None:
            line += (
                f"; tokens per task {self.cost['tokens_per_task']:,.0f} vs {self.cost['baseline_tokens_per_task']:,.0f} "
                f"({self.cost['rise']:+.1%}, at most {self.cost['max_rise']:+.1%})"
            )
        return line

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "refused": self.refused,
            "score": self.score,
            "baseline_score": self.baseline_score,
            "delta": self.delta,
            "tolerance": self.tolerance,
            "regressions": self.regressions,
            "max_regressions": self.max_regressions,
            "reasons": self.reasons,
            "baseline": self.baseline_path,
            "headline": self.headline(),
            "rule": self.rule,
            "margin": self.margin if self.rule == "noninferiority" else None,
            "pass_undecided": self.pass_undecided,
            "noninferiority": self.ni,
            "state": self.state,
            **{k: (self.test or {}).get(k) for k in ("method", "effect", "interval", "p_value", "level")},
            **({"cost": self.cost} if self.cost else {}),
        }


def task_set_difference(baseline_tasks: dict[str, Any], run_tasks: dict[str, Any]) -> list[str]:
    """Why two task sets differ (another --ecdysis-tasks selection), or [] when they are the same."""
    only_base, only_run = (
        sorted(set(baseline_tasks) - set(run_tasks)),
        sorted(set(run_tasks) - set(baseline_tasks)),
    )
    if not only_base and not only_run or not run_tasks:
        return []
    return [
        f"tasks: baseline has {len(baseline_tasks)}, this run {len(run_tasks)} (only in the baseline: "
        f"{shown(only_base)}; only in this run: {shown(only_run)})"
    ]


def task_rewards(
    baseline_tasks: dict[str, Any], run_tasks: dict[str, Any]
) -> tuple[dict[str, float], dict[str, float]]:
    """Per-task figures the paired test compares: each task's `mean_reward`, or, when the baseline was
    written before baselines kept it, the success rate `successes / n` on both sides (the same measure)."""
    use_mean = all("mean_reward" in v for v in baseline_tasks.values())

    def value(v: dict[str, Any]) -> float | None:
        if use_mean:
            return v.get("mean_reward")
        return v["successes"] / v["n"] if v.get("n") else None

    def side(tasks: dict[str, Any]) -> dict[str, float]:
        return {k: x for k, x in ((k, value(v)) for k, v in tasks.items()) if x is not None}

    return side(baseline_tasks), side(run_tasks)


def refusal(baseline: dict[str, Any], run_tasks: dict[str, Any]) -> str | None:
    """Why a run over `run_tasks` (keys `<suite>/<task_id>`) cannot be compared with `baseline`, or None.

    Used right after collection (`selection.check_collected`, a usage error before any trial) and at the
    end of the run (`verdict`).
    """
    suites = "+".join(sorted({key.split("/", 1)[0] for key in run_tasks}))
    diff = []
    if suites and baseline.get("suite") and baseline["suite"] != suites:
        diff.append(f"suite: baseline {baseline['suite']!r}, this run {suites!r}")
    else:
        diff = task_set_difference(baseline.get("tasks", {}), run_tasks)
    if not diff:
        return None
    return (
        "it was made with other tasks (" + "; ".join(diff) + "); run the baseline's tests and "
        "--ecdysis-tasks, or save a new baseline with --ecdysis-save-baseline"
    )


def regressions(baseline_tasks: dict[str, Any], run_tasks: dict[str, Any]) -> list[str]:
    """Tasks solved in the baseline and not solved now (absent now counts as not solved)."""
    return sorted(
        k
        for k, v in baseline_tasks.items()
        if v.get("solved") and not run_tasks.get(k, {}).get("solved", False)
    )


def verdict(
    summary: dict[str, Any],
    baseline: dict[str, Any],
    *,
    tolerance: float,
    max_regressions: int | None,
    missing: list[str],
    n_collected: int,
    baseline_path: str = "",
    rule: str = "noninferiority",
    method: str = "sign",
    level: float = 0.05,
    max_cost_rise: float | None = None,
    margin: float = DEFAULT_MARGIN,
    pass_undecided: bool = False,
) -> GateVerdict:
    """Compare a run summary with a baseline. Never raises for a bad run: it fails with reasons.

    `rule`: one of `RULES` (`--ecdysis-gate-rule`; the former names `sequential` and `adaptive` are judged as
    `paired`: the gate cannot re-run the baseline). `method`, `level`: ini `ecdysis_accept_method` (paired)
    and ini `ecdysis_accept_level` (paired, and noninferiority's one-sided level). `margin`, `pass_undecided`:
    `--ecdysis-gate-margin` and `--ecdysis-gate-pass-undecided` (noninferiority; rates on the leaderboard
    world: `benchmarks/leaderboard_bench.py`, docs/ci.md). `max_cost_rise`: ini `ecdysis_gate_max_cost_rise`
    (None: tokens per task not checked).

    Raises:
        ValueError: an unknown rule (the callers check the option before any trial).
    """
    rule = "paired" if rule in ("sequential", "adaptive") else rule
    if rule not in RULES:
        raise ValueError(f"gate rule {rule!r} is not one of {', '.join(RULES)}")
    v = GateVerdict(
        passed=False,
        score=summary.get("suite_score"),
        baseline_score=baseline.get("suite_score"),
        tolerance=tolerance,
        max_regressions=max_regressions,
        baseline_path=baseline_path,
        rule=rule,
        margin=margin,
        pass_undecided=pass_undecided,
    )
    # nothing collected: a failure below ("no trial case was collected"), not another suite ('none')
    diff = mismatches(baseline, summary, MATCH_FIELDS if summary.get("tasks") else MATCH_FIELDS[1:])
    if not diff and not missing:
        diff = task_set_difference(baseline.get("tasks", {}), summary.get("tasks", {}))
    if diff:
        v.refused = True
        v.reasons.append(
            "baseline refused, not compared (" + "; ".join(diff) + "); save a baseline for "
            "this suite, split, trials, model and nonce"
        )
        return v
    crashes = summary.get("worker_crashes") or []
    if n_collected == 0 and crashes:  # not a test path problem: the workers died before collecting
        said = [ln.strip() for ln in str(crashes[0].get("error", "")).splitlines() if ln.strip()]
        v.reasons.append(
            f"every xdist worker crashed before collecting a test (first {crashes[0].get('worker')}: "
            f"{said[-1][:300] if said else 'no error text'}); its traceback is under "
            f"'[{crashes[0].get('worker')}] node down' in the output and in summary.json worker_crashes"
        )
    elif n_collected == 0:
        v.reasons.append("no trial case was collected: check the test paths and --ecdysis-tasks")
    if missing:
        v.reasons.append(f"{len(missing)} collected case(s) never reported a result: {shown(missing)}")
    if summary.get("n_infra_errors"):
        v.reasons.append(
            f"{summary['n_infra_errors']} trial(s) ended with an infrastructure error; "
            "the score is not comparable (check the endpoint and rerun)"
        )
    base_means, run_means = task_rewards(baseline.get("tasks", {}), summary.get("tasks", {}))
    if base_means and run_means:
        test = regression_test(base_means, run_means, method=method, level=level)
        v.test = {
            "method": test.method,
            "effect": test.effect,
            "interval": list(test.interval) if test.interval else None,
            "p_value": test.p_value,
            "level": level,
            "n_tasks": test.n_tasks,
            "wins": test.wins,
            "losses": test.losses,
        }
    if v.score is None:
        v.reasons.append("no trial was scored")
    elif rule == "noninferiority":
        v.ni = _noninferiority(baseline.get("tasks", {}), summary.get("tasks", {}), margin, level)
        if v.ni is None:
            v.reasons.append("no task was scored in both the baseline and the run")
        elif v.ni["state"] == "fail":
            v.reasons.append(
                f"a drop beyond the margin is shown: Δ {v.ni['effect']:+.3f}, one-sided upper bound "
                f"{v.ni['upper']:+.3f} < -{margin:.3f} (margin {100 * margin:g} points)"
            )
        elif v.ni["state"] == "undecided" and not pass_undecided:
            more = (
                f"about {v.ni['trials_to_decide']} trials per task (baseline and run, now {v.ni['trials']}) "
                "would decide it"
                if v.ni["trials_to_decide"]
                else "no trial count decides it at this estimate"
            )
            v.reasons.append(
                f"undecided: the drop was not shown within the margin (Δ {v.ni['effect']:+.3f}, one-sided "
                f"lower bound {v.ni['lower']:+.3f} <= -{margin:.3f}) nor shown beyond it; {more}, or "
                "let undecided verdicts pass (--ecdysis-gate-pass-undecided, `ecdysis gate --pass-undecided`)"
            )
    elif rule == "paired" and v.test and v.test["n_tasks"] >= sign_min_wins(level):
        if v.test["p_value"] <= level and v.test["effect"] < -tolerance - 1e-9:
            v.reasons.append(
                f"the run is worse than the baseline: {v.test['method']} test over "
                f"{v.test['n_tasks']} task(s), mean per-task drop {-v.test['effect']:.3f} "
                f"(tolerance {tolerance:.3f}), p={v.test['p_value']:.3g} <= level {level:g}"
            )
    elif rule == "paired":
        # a suite too small for the paired test ever to reject (a sign test at level 0.05 needs 5 tasks): a
        # gate that can never fail is no gate, so the plain score rule decides, and the verdict says so
        v.reasons += (
            []
            if v.baseline_score is None or v.score >= v.baseline_score - tolerance - 1e-9
            else [
                f"suite score {v.score:.3f} is {v.baseline_score - v.score:.3f} below the baseline "
                f"{v.baseline_score:.3f} (tolerance {tolerance:.3f}); the paired test was not possible "
                f"({v.test['n_tasks'] if v.test else 0} task(s) in both runs: at least {sign_min_wins(level)} needed), "
                "so the score rule decided"
            ]
        )
    elif v.baseline_score is not None and v.score < v.baseline_score - tolerance - 1e-9:
        v.reasons.append(
            f"suite score {v.score:.3f} is {v.baseline_score - v.score:.3f} below the baseline "
            f"{v.baseline_score:.3f} (tolerance {tolerance:.3f})"
        )
    v.regressions = regressions(baseline.get("tasks", {}), summary.get("tasks", {}))
    if max_regressions is not None and len(v.regressions) > max_regressions:
        v.reasons.append(
            f"{len(v.regressions)} task(s) solved in the baseline are not solved now "
            f"(allowed {max_regressions}): {shown(v.regressions, 10)}"
        )
    if max_cost_rise is not None:
        v.cost, why = cost_rise(summary, baseline, max_cost_rise)
        if why:
            v.reasons.append(why)
    v.passed = not v.reasons
    return v


def task_trials(tasks: dict[str, Any]) -> dict[str, list[float]]:
    """Each task's trials as the non-inferiority test reads them: `n` copies of its `mean_reward` (or of
    `successes / n` for a baseline written before baselines kept it); the test uses their sum and count."""
    out: dict[str, list[float]] = {}
    for key, v in tasks.items():
        n = int(v.get("n") or 0)
        x = v.get("mean_reward") if v.get("mean_reward") is not None else (v["successes"] / n if n else None)
        if n and x is not None:
            out[key] = [float(x)] * n
    return out


def _noninferiority(
    baseline_tasks: dict[str, Any], run_tasks: dict[str, Any], margin: float, level: float
) -> dict[str, Any] | None:
    """`noninferiority` on the two sides' tasks as a dict (None when no task was scored on both), with
    `trials` (per task, the most of either side), `trials_to_decide` (an undecided verdict's trials per task
    at which the estimate would be decided, else None) and `catches` (`smallest_drop` on the baseline's
    rates: the smallest drop this suite and trial count fails with 80% probability; with pass-undecided the
    gate fails only a drop *shown* beyond the margin, `catches_shown`)."""
    base, run = task_trials(baseline_tasks), task_trials(run_tasks)
    try:
        t = noninferiority(base, run, margin=margin, level=level)
    except ValueError:
        return None
    common = sorted(set(base) & set(run))
    k = max(max(len(base[x]), len(run[x])) for x in common)
    fails, shown_drop = smallest_drop(
        pilot_rates({x: base[x] for x in common}), k, margin=margin, level=level
    )
    return {
        "state": t.state,
        "effect": t.effect,
        "se": t.se,
        "lower": t.lower,
        "upper": t.upper,
        "margin": margin,
        "level": level,
        "n_tasks": t.n_tasks,
        "trials": k,
        "trials_to_decide": None if t.more_trials is None else k + t.more_trials,
        "catches": fails,
        "catches_shown": shown_drop,
    }
