"""The last lines of an evolution or a gate run: what happened, in words, after everything pytest prints.

pytest ends a run with its short test summary (`FAILED ...` lines) and the counts line (`5 failed, 25
passed`). In an evolution those failures are the starting harness's trials, the evidence the loop worked
from, and in a gate they may be within the baseline's: read last, they look like the run's failure. So
after pytest's counts line (`VerdictPrinter`, an outermost `pytest_sessionfinish` wrapper) the run ends
with an `ecdysis verdict` section:

- evolution: how many rounds were accepted and the scores; the branch and how to see it, or why no
  branch was made (each round's outcome); or why the loop stopped and how to resume;
- gate: PASSED / FAILED / REFUSED and why;
- a round whose candidate asked for another model than the configured one (`model_override_lines`);
- either way: what the failed trials above are, whether harness code ran without the OS sandbox (and what
  only the sandbox stops), the exit status, and where the files are.

`verdict_lines` is pure (plain data in, `(text, colour)` out) so `ecdysis` tools and tests can call it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_ecdysis.core.errors import shown
from pytest_ecdysis.gate.acceptance import accept_text, sign_min_wins
from pytest_ecdysis.gate.rates import confirmation_trials, look_trials, rule_rates, run_rates
from pytest_ecdysis.report.evolution import OUTCOME_TEXT, caveats, fmt, shorten

Line = tuple[str, str | None]  # (text, colour: "green", "yellow", "red" or None)


def evolution_lines(
    doc: dict[str, Any] | None, error: str | None, run_id: str, resumable: bool = False
) -> list[Line]:
    """The verdict of an evolution: its `evolution.json` document, or the error that stopped it (and
    whether the loop had started, so that `--ecdysis-resume` can continue it)."""
    if error or not doc:
        why = (error or "").removeprefix("--ecdysis-evolve stopped: ").removeprefix("--ecdysis-evolve: ")
        if not why:  # no error and no result: the loop was interrupted (Ctrl-C, SIGTERM)
            head = "evolution interrupted before it finished: no verdict"
        else:  # a resumable loop may have accepted rounds already: "nothing was made" would not be true
            head = (
                f"evolution stopped before it finished: {why}"
                if resumable
                else f"evolution stopped, nothing was made: {why}"
            )
        out: list[Line] = [(head, "red")]
        if resumable and "budget reached" in why:  # the same options would stop at the same place
            out.append(
                (f"what was done is kept: continue with --ecdysis-resume {run_id} and a higher budget", None)
            )
        elif resumable:
            out.append(
                (f"what was done is kept: continue with --ecdysis-resume {run_id} (same options)", None)
            )
        return out
    rounds = doc.get("rounds") or []
    accepted = [r for r in rounds if r.get("accepted")]
    start, end = doc.get("start") or {}, doc.get("incumbent") or {}
    head = (
        f"evolution finished: {len(accepted)} of {len(rounds)} round(s) accepted; train score "
        f"{fmt(start.get('score'))} -> {fmt(end.get('score'))}"
    )
    test = doc.get("test") or {}
    if test.get("start") and test.get("frozen"):
        head += (
            f"; held-out test split {fmt(test['start'].get('suite_score'))} -> "
            f"{fmt(test['frozen'].get('suite_score'))} ({test.get('trials')} trial(s) per task)"
        ) + selection_note(doc)
    elif test.get("skipped"):
        head += "; test split not scored (--ecdysis-test-trials 0)"
    out = [(head, "green" if doc.get("branch") else "yellow")]
    out += decided_by(doc)
    out += model_override_lines(doc)
    out += heldout_lines(doc)
    gap = test.get("gap") or {}
    if gap.get("said"):
        out.append((f"read before merging: {gap['line']}", "yellow"))
    lost = (test.get("regressions") or {}).get("solved_to_failed") or []
    if lost:
        out.append(
            (
                f"held-out regression(s): the frozen harness lost {len(lost)} test task(s) the start solved in "
                f"every trial: {shown(lost, 12)}",
                "yellow",
            )
        )
    if doc.get("branch"):
        out.append(
            (
                f"branch {doc['branch']} holds the accepted change(s); see them with: {doc.get('diff_command')}",
                "green",
            )
        )
        out += [(f"read before merging: {c}", "yellow") for c in caveats(doc)]
        out.append(
            (
                "your checkout, index and current branch were not touched; review the branch, then merge it "
                "or delete it (git branch -D " + doc["branch"] + ")",
                None,
            )
        )
    else:
        why = "; ".join(_round_why(r) for r in rounds) or "no round ran"
        out.append((f"no branch was made: no round {_criterion(doc)}: {why}", "yellow"))
    return out


def _round_why(r: dict[str, Any]) -> str:
    """`round 2 refused by the held-out check (train gain +0.750 vs held-out gain +0.000)` or `round 1
    rejected (<reason, shortened>)`: a round's outcome in the no-branch line."""
    held = r.get("heldout") or {}
    if held.get("refused"):
        gains = (
            f"train gain {held['train_gain']:+.3f} vs held-out gain {held['held_gain']:+.3f}"
            if held.get("train_gain") is not None
            else shorten(str(held.get("why") or ""), 90)
        )
        return f"round {r.get('round')} refused by the held-out check ({gains})"
    return f"round {r.get('round')} {OUTCOME_TEXT.get(str(r.get('outcome')), r.get('outcome'))}" + (
        f" ({shorten(r.get('reason') or '', 90)})" if r.get("reason") else ""
    )


def heldout_lines(doc: dict[str, Any]) -> list[Line]:
    """The held-out checks in the verdict (`gate.heldout.heldout_summary`): each refusal with its gap,
    bound and the train tasks that carried the gain; the checks that could not be made, once (what the test
    figure then means is in the head line: `selection_note`)."""
    from pytest_ecdysis.gate.heldout import heldout_summary

    held = heldout_summary(doc)
    if held is None:
        return []
    out: list[Line] = []
    for c in held["checks"]:
        where = (
            f"round {c.get('round')}"
            + (f" step {c['step']}" if c.get("step") is not None else "")
            + (f" proposal {c['proposal']}" if c.get("proposal") is not None else "")
        )
        if c.get("refused"):
            out.append((f"{where} refused, not committed: {c.get('line')}", "yellow"))
    why = sorted({str(c.get("why")) for c in held["checks"] if not c.get("made")})
    if why:
        out.append(
            (
                f"held-out check could not be made for {held['not_made']} candidate(s): {'; '.join(why)}",
                "yellow",
            )
        )
    return out


def selection_note(doc: dict[str, Any]) -> str:
    """`; the test split also decided 2 held-out check(s) (1 refused): a selection set` for the verdict's
    head line after the test figure, or "" when no held-out check was made on it."""
    from pytest_ecdysis.gate.heldout import heldout_summary

    held = heldout_summary(doc)
    if held is None or not held["refused"] + held["passed"]:
        return ""
    return (
        f"; the test split also decided {held['refused'] + held['passed']} held-out check(s) "
        f"({held['refused']} refused): a selection set, not an untouched estimate"
    )


def model_override_lines(doc: dict[str, Any]) -> list[Line]:
    """One line per round (or instance-level step) whose candidate asked for another model than the
    configured one during its validation (`RoundRecord.model_overridden`: trials with the trusted side's
    `model_overridden` note; those calls were made with the configured model, so the score is that model's).
    An accepted one is on the branch, and outside pytest-ecdysis its harness would ask for that model."""
    model = doc.get("model") or "?"
    out: list[Line] = []
    for r in doc.get("rounds") or []:
        for where, rec in [(f"round {r.get('round')}", r)] + [
            (f"round {r.get('round')} step {st.get('step')}", st) for st in r.get("steps") or []
        ]:
            n = int(rec.get("model_overridden") or 0)
            if not n:
                continue
            if rec.get("accepted") or rec.get("outcome") == "accepted":
                tail = (
                    "; its change is on the branch, and outside pytest-ecdysis that harness would ask for "
                    "the other model: remove that from it before merging"
                )
            else:
                tail = f" ({OUTCOME_TEXT.get(rec.get('outcome'), rec.get('outcome'))})"
            out.append(
                (
                    f"model override: {where}'s candidate asked for another model than the configured {model} "
                    f"in {n} validation trial(s); those calls were made with {model}, so its score is "
                    f"{model}'s{tail}",
                    "yellow",
                )
            )
    return out


def decided_by(doc: dict[str, Any]) -> list[Line]:
    """`decided by: <rule>; <its measured error rates and their source>; confirmation spent N trial(s)`."""
    if not doc.get("accept"):
        return []
    rates = run_rates(doc)
    spent = confirmation_trials(doc)
    rule = doc["accept"].get("rule")
    accept = {**doc["accept"], "budget": (doc.get("adaptive") or {}).get("budget")}
    text = f"decided by: {accept_text(accept)}"
    if rule == "adaptive":
        text += f"; measured: {rule_rates(doc['accept'])}; the looks spent {look_trials(doc):,} trial(s)"
    else:
        text += (
            f"; {rates}"
            if rates
            else "; its error rates were not measured at these settings (docs/benchmarks.md)"
        )
    if rule == "sequential":
        text += f"; the confirmation spent {spent} trial(s)"
    out: list[Line] = [(text, None)]
    if doc.get("rescore") == "never" and rule in ("adaptive", "sequential", "paired"):
        out.append(
            (
                "shortcut: ini ecdysis_rescore = never: every candidate was compared with the incumbent's "
                "earlier run, not a re-run beside it (the measured rates assume a re-run)",
                "yellow",
            )
        )
    return out


def _criterion(doc: dict[str, Any]) -> str:
    """What a round needed to be accepted under the run's `--ecdysis-accept` rule (`evolution.json` `accept`),
    or that no test was possible: no round reached a decision, or too few tasks for the test to accept."""
    accept = doc.get("accept") or {}
    rounds = doc.get("rounds") or []
    decided = [r["decision"] for r in rounds if r.get("decision")]
    validated = [r for r in rounds if r.get("outcome") in ("accepted", "rejected", "inconclusive")]
    if any((r.get("heldout") or {}).get("refused") for r in rounds):
        return "passed both its test and the held-out check"
    if accept.get("rule") == "adaptive":
        return (
            f"passed the adaptive test (an improvement significant at level {accept.get('level', 0.05):g} "
            "after its looks)"
        )
    if accept.get("rule") in ("paired", "sequential") and rounds and not validated:
        return "reached a test (no candidate was validated)"
    if accept.get("rule") in ("paired", "sequential") and decided:
        n = max(int(d.get("n_tasks") or 0) for d in decided)
        need = sign_min_wins(accept.get("level") or 0.05)
        if accept["rule"] == "paired" and accept.get("method", "sign") == "sign" and n < need:
            return f"could pass: no test was possible ({n} tasks: at least {need} wins needed)"
    if accept.get("rule") == "sequential":
        return (
            f"passed the sequential test (an improvement significant at level {accept.get('level', 0.05):g} "
            "after confirmation)"
        )
    if accept.get("rule") == "paired":
        return (
            f"passed the paired {accept.get('method', 'sign')} test (an improvement significant at level "
            f"{accept.get('level', 0.05):g})"
        )
    return "scored strictly higher than the harness it started from"


def gate_lines(gate: dict[str, Any]) -> list[Line]:
    """The gate's verdict: its headline and, when it did not pass, its reasons."""
    colour = "green" if gate.get("passed") else "red"
    out: list[Line] = [(gate["headline"], colour)]
    if not gate.get("passed"):
        out += [(f"  - {r}", None) for r in gate.get("reasons", []) if r not in gate["headline"]]
    return out


def verdict_lines(
    summary: dict[str, Any],
    *,
    evolve: bool,
    gate: dict[str, Any] | None,
    evolution: Any,
    evolution_error: str | None,
    run_id: str,
    run_path: Any,
    exit_status: int,
    sandbox: str | None = None,
) -> list[Line]:
    """Every line of the `ecdysis verdict` section, in order (see the module docstring). `sandbox`: the
    line saying harness code ran without the OS sandbox and what only the sandbox stops (None: it ran
    sandboxed; `validate.sandbox.verdict_line`)."""
    out: list[Line] = []
    if evolve:
        resumable = bool(run_path) and (Path(run_path) / "evolution.json").is_file()
        out += evolution_lines(evolution, evolution_error, run_id, resumable)
    if gate:
        out += gate_lines(gate)
    failed = int(summary.get("n_failures") or 0) + int(summary.get("n_infra_errors") or 0)
    if failed and exit_status == 0:
        whose = (
            "the starting harness's trials, the evidence the loop worked from"
            if evolve
            else "within what the baseline allows"
        )
        out.append(
            (f"the {failed} failed trial(s) listed above are {whose}: they do not fail this run", None)
        )
    if sandbox:
        out.append((sandbox, "yellow"))
    word = {0: "success", 1: "failure", 2: "interrupted", 4: "usage error"}.get(exit_status, "error")
    where = f"; files in {run_path} (read back with: ecdysis show {run_path})" if run_path else ""
    out.append((f"exit status {exit_status} ({word}){where}", None))
    return out


class VerdictPrinter:
    """Prints the verdict section after pytest's own last line (registered on the controller)."""

    def __init__(self, state: Any) -> None:
        self.state = state

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Any:
        result = yield  # every other implementation ran: pytest's counts line is printed, the status is final
        state, outcome = self.state, self.state.outcome
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if outcome is None or reporter is None or not (state.cfg.evolve or state.cfg.gate):
            return result
        lines = verdict_lines(
            outcome.summary,
            evolve=state.cfg.evolve,
            gate=outcome.summary.get("gate"),
            evolution=outcome.evolution,
            evolution_error=outcome.evolution_error,
            run_id=state.run_id,
            run_path=outcome.run_path,
            exit_status=int(session.exitstatus),
            sandbox=getattr(state, "sandbox_verdict", None),
        )
        reporter.write_sep("=", "ecdysis verdict")
        for text, colour in lines:
            reporter.write_line(text, **({colour: True, "bold": colour != "yellow"} if colour else {}))
        return result
