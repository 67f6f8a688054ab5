"""What a session collected, checked on the controller right after collection, before any trial runs.

Suites that implement the `ecdysis_case_task` hook say which `(suite, task)` each collected node id is
(under xdist the controller sees node ids only). From that:

- `check_tasks`: every `--ecdysis-tasks` id is a task, in the split, of a suite whose tests were collected.
  An id that is not is a usage error saying where it lives (another split, a suite whose tests were not
  collected, no suite at all), never a silent "1 skipped" run that exits 0. An id of a collected suite
  whose cases were all deselected (pytest-split's `--splits/--group` gave them to another shard, or `-k`,
  `-m`) is not an error: the plugin checks the collection as it was before any deselection where it sees
  it (`TrialCollector.pytest_collection_modifyitems`; under xdist the workers' ids, after it).
- `check_gate`: the collected `(suite, task)` pairs are the baseline's; another task set is refused as a
  usage error now, not after the whole suite ran (`gate.baseline.refusal`).

Node ids no suite claims (ordinary tests, suites without the hook) leave both checks to the end of the
run (`gate.baseline.verdict` still refuses there). This module must not import tau2 or task suites: it asks
`registry`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import UsageError

#: how many valid ids a message lists per suite before "... (N in all)".
SHOW_IDS = 40
#: about how many characters of ids a message lists per suite.
SHOW_CHARS = 600


@dataclass
class Collected:
    """The collected node ids, sorted by what the suites say they are."""

    cases: dict[str, list[str]] = field(default_factory=dict)  # "<suite>/<task_id>" -> node ids
    suites: set[str] = field(default_factory=set)  # suites with a collected test (with or without cases)
    unclaimed: list[str] = field(default_factory=list)  # node ids no suite claims


def classify(nodeids: Iterable[str]) -> Collected:
    """Ask the installed suites what each node id is."""
    from pytest_ecdysis.core.registry import case_task

    out = Collected()
    for nodeid in nodeids:
        claim = case_task(nodeid)
        if claim is None:
            out.unclaimed.append(nodeid)
            continue
        suite, task = claim
        out.suites.add(suite)
        if task is not None:
            out.cases.setdefault(f"{suite}/{task}", []).append(nodeid)
    return out


def check_collected(
    cfg: EcdysisConfig,
    nodeids: Iterable[str],
    baseline: dict[str, Any] | None = None,
    before_deselection: Iterable[str] | None = None,
) -> None:
    """The checks this session asks for (`--ecdysis-tasks`, `--ecdysis-gate` with its `baseline`).

    `nodeids`: the cases that will run; `before_deselection`: the collection before `-k`, `-m` or a split
    deselected any (None: not known, `nodeids` stand for it). The ids are checked against the suites of
    the latter, the baseline against the former.

    Raises:
        UsageError: an id is no task of a collected suite, or the gate's baseline holds other tasks.
    """
    if not cfg.tasks and baseline is None:
        return
    nodeids = list(nodeids)
    collected = classify(nodeids)
    if collected.unclaimed or not collected.suites:
        return  # tests of a suite that does not tell its tasks: the end of the run checks what it can
    if cfg.tasks:
        check_tasks(
            cfg.tasks, cfg.split, collected if before_deselection is None else classify(before_deselection)
        )
    if baseline is not None:
        from pytest_ecdysis.gate.baseline import refusal

        reason = refusal(baseline, {key: None for key in collected.cases})
        if reason:
            raise UsageError(f"--ecdysis-gate refuses baseline {cfg.baseline} before any trial: {reason}")


def check_tasks(requested: tuple[str, ...], split: str, collected: Collected) -> None:
    """Raise a UsageError naming every requested id that is no task (in `split`) of a collected suite, and
    where it lives. An id of a collected suite with no collected case (deselected) passes."""
    from pytest_ecdysis.core.registry import task_ids

    selected = {key.split("/", 1)[1] for key in collected.cases}
    unselected = [t for t in dict.fromkeys(requested) if t not in selected]
    if not unselected:  # the usual case: asking the suites for their task ids (τ²: its import and every
        return  # domain's tasks, 1.6 CPU s) would hold up the workers' first cases for nothing
    known = {t for suite, ids in task_ids(split).items() if suite in collected.suites for t in ids}
    missing = [t for t in unselected if t not in known]
    if missing:
        raise UsageError("--ecdysis-tasks: " + "; ".join(_where(t, split, collected) for t in missing))


def _where(task: str, split: str, collected: Collected) -> str:
    """Where `task` lives, the collected suites first: a collected suite that has it in another split (the
    likely intent: `--ecdysis-tasks 2` on airline's train split means airline's test task 2) is named with
    the split and the option that selects it, before a suite whose tests were not collected."""
    from pytest_ecdysis.core.registry import task_ids

    in_split = task_ids(split)
    splits = {sp: (in_split if sp == split else task_ids(sp)) for sp in ("train", "test", split)}
    holders = [
        (s, sp) for sp, by_suite in splits.items() for s, ids in sorted(by_suite.items()) if task in ids
    ]
    ran = ", ".join(sorted(collected.suites))
    said = []
    other_split = sorted({(s, sp) for s, sp in holders if s in collected.suites and sp != split})
    if other_split:
        where = ", ".join(f"{s} has it in split {sp!r}" for s, sp in other_split)
        said.append(
            f"{task} is not in split {split!r} ({where}); pass --ecdysis-split {other_split[0][1]} or all "
            "to select it"
        )
    elsewhere = sorted({(s, sp) for s, sp in holders if s not in collected.suites})
    if elsewhere:
        where = ", ".join(s if sp == split else f"{s} (split {sp!r})" for s, sp in elsewhere)
        said.append(
            f"{'it' if said else task} is a task of {where}, whose tests were not collected (this session "
            f"collected {ran}); add that suite's test module to the command"
            + (f" with --ecdysis-split {elsewhere[0][1]}" if elsewhere[0][1] != split else "")
        )
    if not said:
        return f"{task} is a task of no installed suite; ids of split {split!r}: {_ids(in_split, collected.suites)}"
    return "; ".join(said) + f"; ids of split {split!r}: {_ids(in_split, collected.suites)}"


def _ids(by_suite: dict[str, list[str]], suites: set[str]) -> str:
    """At most `SHOW_IDS` ids and about `SHOW_CHARS` characters of them per suite (τ² telecom's ids run to
    200 characters each), then "... (N in all)"."""
    shown = []
    for suite, ids in sorted(by_suite.items()):
        if suites and suite not in suites:
            continue
        listed: list[str] = []
        for task_id in ids[:SHOW_IDS]:
            if listed and sum(len(t) + 2 for t in listed) + len(task_id) > SHOW_CHARS:
                break
            listed.append(task_id)
        more = f", ... ({len(ids)} in all)" if len(listed) < len(ids) else ""
        shown.append(f"{suite}: {', '.join(listed)}{more}")
    return "; ".join(shown) or "none"
