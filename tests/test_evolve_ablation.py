"""Minimal accepted edits (ini `ecdysis_ablate`): an accepted candidate of several changes (hunks of its diff)
is re-validated without each in turn, and a change whose removal loses nothing is dropped; the commit and
`rounds/<n>/ablation.json` say so. End to end on a tiny suite whose scores are known in advance."""

from __future__ import annotations

import json

import pytest
from tiny_evolution import CONFTEST, evolution, git, make_project, run_evolution, script

from pytest_ecdysis.evolve.ablation import removal_loses
from pytest_ecdysis.evolve.ablation_changes import changes_of, without
from pytest_ecdysis.git.snapshot import Snapshot

pytest_plugins = ["pytester"]

# six tasks; task i is solved when LEVEL + BONUS > i
SUITE = """
import pytest
from pytest_ecdysis import TrialResult, record_trial
from pytest_ecdysis.core.harness import load_harness
from pytest_ecdysis.plugin import get_state


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("task_id", [str(i) for i in range(6)])
def test_task(request, task_id):
    state = get_state(request.config)
    h = load_harness(state.harness_dir)
    reward = 1.0 if int(task_id) < h.LEVEL + h.BONUS else 0.0
    record_trial(request.node, TrialResult(
        suite="tiny", task_id=task_id, trial=0, reward=reward, termination_reason="agent_stop",
        components={"db": reward}, harness_id=state.harness_id,
        tool_calls=[{"name": "book", "arguments": {"id": task_id}, "result": "error", "error": True}]))
    assert reward >= 1.0
"""

HARNESS = '''"""A tiny harness: the suite solves task i when LEVEL + BONUS > i."""

LEVEL = 1

BONUS = 0


def build_agent(**kwargs):
    return None
'''

# the spec's parameters: {"set": {NAME: value}, "append": "text"}
EDITOR = """
import json, re, sys
from pathlib import Path

spec_path, harness = Path(sys.argv[1]), Path(sys.argv[2])
step = json.loads(spec_path.read_text())["changes"][0]["parameters"]
init = harness / "__init__.py"
text = init.read_text()
for name, value in step.get("set", {}).items():
    text = re.sub(rf"^{name} = .*$", f"{name} = {value}", text, count=1, flags=re.M)
if step.get("append"):
    text += "\\n" + step["append"] + "\\n"
init.write_text(text)
"""


@pytest.mark.slow
def test_ablation_drops_a_change_that_does_nothing_keeps_changes_that_matter(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 1: LEVEL 1 -> 2 and an unused constant appended: without the constant the score stays 2/6, so it
    is dropped and the commit holds LEVEL only; without LEVEL it falls to 1/6, so LEVEL stays. Round 2:
    LEVEL 2 -> 3 and BONUS 0 -> 1, each worth a task: both kept. Round 3: one change: not ablated."""
    project = make_project(pytester, monkeypatch, CONFTEST, suite=SUITE, harness=HARNESS, editor=EDITOR)
    script(
        project,
        [
            {"set": {"LEVEL": 2}, "append": "UNUSED_LIMIT = 50"},
            {"set": {"LEVEL": 3, "BONUS": 1}},
            {"set": {"LEVEL": 5}},
        ],
    )
    result = run_evolution(
        project,
        "--ecdysis-rounds",
        "3",
        "-o",
        "ecdysis_ablate=true",
        "-o",
        "ecdysis_rescore=never",
        "--ecdysis-test-trials",
        "0",
    )
    assert result.ret == 0, result.stdout.str()
    doc = evolution(project)
    rounds = doc["rounds"]
    assert [r["outcome"] for r in rounds] == ["accepted"] * 3
    assert [r["score_after"] for r in rounds] == pytest.approx([2 / 6, 4 / 6, 1.0])
    run = project.path / ".ecdysis" / "runs" / "run1"

    # round 1: reduced to the change that matters
    abl = json.loads((run / "rounds" / "1" / "ablation.json").read_text())
    assert abl["unit"] == "hunk" and abl["kept"] == [0] and abl["dropped"] == [1]
    first, second = abl["changes"]
    assert "+LEVEL = 2" in first["diff"] and first["kept"] and "prefers keeping it" in first["why"]
    assert first["validation"]["score"] == pytest.approx(1 / 6)
    assert "+UNUSED_LIMIT = 50" in second["diff"] and not second["kept"]
    assert "removal lost nothing under the strict rule" in second["why"]
    assert rounds[0]["ablation"] == {
        "changes": 2,
        "kept": 1,
        "dropped": 1,
        "unit": "hunk",
        "file": "ablation.json",
    }
    assert rounds[0]["candidate_score"] == pytest.approx(2 / 6)
    assert rounds[0]["harness_id_after"] == second["validation"]["harness_id"]
    assert "cache" in abl  # on for the ablation (the tiny suite calls no model: nothing to hit)
    result.stdout.fnmatch_lines(
        [
            "*round 1: ablation of 2 changes (hunks of the diff)*response cache turned on for the ablation*",
            "*round 1: ablation 2/2 __init__.py @@ -* @@: dropped: removal lost nothing*",
        ]
    )

    # round 2: both changes matter; round 3: a single change, no re-validation
    abl2 = json.loads((run / "rounds" / "2" / "ablation.json").read_text())
    assert abl2["kept"] == [0, 1] and abl2["dropped"] == []
    assert [c["validation"]["score"] for c in abl2["changes"]] == pytest.approx([3 / 6, 3 / 6])
    abl3 = json.loads((run / "rounds" / "3" / "ablation.json").read_text())
    assert (
        abl3["skipped"] == "a single change: nothing to ablate"
        and not (run / "rounds" / "3" / "ablation").exists()
    )

    # the commits: round 1 holds LEVEL only and says what was dropped and why
    log = git(project.path, "log", "--format=%H", "main..ecdysis/run1").split()
    r1 = log[-1]
    diff = git(project.path, "show", "--format=", r1)
    assert "+LEVEL = 2" in diff and "UNUSED_LIMIT" not in diff
    message = git(project.path, "show", "-s", "--format=%B", r1)
    assert "suite score 0.1667 -> 0.3333" in message
    assert (
        "ablation (ecdysis_ablate, strict rule): kept 1 of 2 change(s) (hunks of the diff); dropped 1"
        in message
    )
    assert "- dropped: __init__.py @@ -9,0 +10,2 @@: removal lost nothing" in message
    message2 = git(project.path, "show", "-s", "--format=%B", log[-2])
    assert "kept 2 of 2 change(s)" in message2
    final = git(project.path, "show", "ecdysis/run1:tiny_harness/__init__.py")
    assert "LEVEL = 5" in final and "BONUS = 1" in final and "UNUSED_LIMIT" not in final


def _snap(base: bytes, cand: bytes) -> Snapshot:
    return Snapshot(
        base_commit="0" * 40,
        rel="h",
        files={"a.py": cand},
        base_files={"a.py": base},
        outside=[],
        too_large=[],
    )


def test_changes_are_zero_context_hunks_and_taking_them_back_gives_the_base() -> None:
    base = b"A = 1\n\nB = 2\n"
    snap = _snap(base, b"A = 3\n\nB = 4\nC = 5\n")
    changes = changes_of(snap)
    assert [c.header for c in changes] == ["@@ -1 +1 @@", "@@ -3 +3,2 @@"]
    assert without(snap, changes, {0}).files["a.py"] == b"A = 1\n\nB = 4\nC = 5\n"
    assert without(snap, changes, {0, 1}).files["a.py"] == base
    many = _snap(
        b"".join(b"X%d = 0\n\n" % i for i in range(9)), b"".join(b"X%d = 1\n\n" % i for i in range(9))
    )
    assert [c.header for c in changes_of(many)] == ["whole file"]  # above MAX_CHANGES hunks: one per file


def test_removal_loses_follows_the_run_rule() -> None:
    """Under `paired` a change stays only when the kept harness is significantly better than without it."""

    def trials(rewards: list[float]) -> list[dict]:
        return [{"suite": "s", "task_id": str(i), "reward": r} for i, r in enumerate(rewards)]

    inc = (0.0, trials([0.0] * 10))
    kept = (0.8, trials([1.0] * 8 + [0.0] * 2))
    one_less = (0.7, trials([1.0] * 7 + [0.0] * 3))
    kw = {"method": "sign", "level": 0.05, "inc": inc, "kept": kept}
    assert "prefers keeping it" in removal_loses("strict", reduced=one_less, **kw)
    assert removal_loses("paired", reduced=one_less, **kw) is None  # one task: not significant
    assert "prefers keeping it" in removal_loses("paired", reduced=inc, **kw)
    assert removal_loses("strict", reduced=kept, **kw) is None


def test_ablate_is_an_ini_key_an_evolution_reads(pytester: pytest.Pytester) -> None:
    """`ecdysis_ablate = true` is ignored by a session that does not evolve; the former option
    `--ecdysis-ablate` is a usage error naming the ini key."""
    pytester.makepyfile("def test_x(): pass")
    assert pytester.runpytest_subprocess("-o", "ecdysis_ablate=true").ret == pytest.ExitCode.OK
    result = pytester.runpytest_subprocess("--ecdysis-ablate")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--ecdysis-ablate was removed: set the ini key ecdysis_ablate (in the ini file, "
            "or -o ecdysis_ablate=true for one run)*"
        ]
    )


# eight tasks, honouring --ecdysis-tasks and --ecdysis-trials; task i < 7 is solved when i < LEVEL; task 7 is
# solved by a harness with LEVEL < 7, and by one with LEVEL >= 7 in every trial but the first (noise)
FLAKY_SUITE = """
import pytest
from pytest_ecdysis import TrialResult, record_trial
from pytest_ecdysis.core.harness import load_harness
from pytest_ecdysis.plugin import get_state


def pytest_generate_tests(metafunc):
    cfg = get_state(metafunc.config).cfg
    tasks = [str(i) for i in range(8) if cfg.tasks is None or str(i) in cfg.tasks]
    metafunc.parametrize("task_id,trial", [(t, k) for t in tasks for k in range(cfg.trials)])


@pytest.mark.ecdysis_trial
def test_task(request, task_id, trial):
    state = get_state(request.config)
    level = load_harness(state.harness_dir).LEVEL
    i = int(task_id)
    reward = float(i < level if i < 7 else (level < 7 or trial >= 1))
    record_trial(request.node, TrialResult(
        suite="tiny", task_id=task_id, trial=trial, reward=reward, termination_reason="agent_stop",
        components={"db": reward}, harness_id=state.harness_id,
        tool_calls=[{"name": "book", "arguments": {"id": task_id}, "result": "error", "error": True}]))
    assert reward >= 1.0
"""


@pytest.mark.slow
def test_extra_trials_of_flipped_tasks_decide_a_paired_round(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LEVEL 1 -> 7 gains tasks 1-6 and loses task 7 in its first trial only. One trial per task: +6/-1, the
    Wilcoxon test on ±1 differences is the sign test, p = 8/128 > 0.05: rejected. With 3 extra trials of the
    7 flipped tasks for both harnesses, task 7's loss shrinks to -0.5 and p = 2/128: accepted, the budget
    printed and recorded."""
    project = make_project(pytester, monkeypatch, CONFTEST, suite=FLAKY_SUITE, editor=EDITOR)
    script(project, [{"set": {"LEVEL": 7}}])
    result = run_evolution(
        project,
        "--ecdysis-rounds",
        "1",
        "-o",
        "ecdysis_rescore=never",
        "--ecdysis-test-trials",
        "0",
        "--ecdysis-accept",
        "paired",
        "-o",
        "ecdysis_accept_method=wilcoxon",
        "-o",
        "ecdysis_accept_extra_trials=3",
    )
    assert result.ret == 0, result.stdout.str()
    (row,) = evolution(project)["rounds"]
    extra = row["extra_trials"]
    assert extra["tasks"] == [f"tiny/{i}" for i in range(1, 8)] and extra["budget_trials"] == 42
    assert extra["decision_before"]["p_value"] == pytest.approx(8 / 128)
    assert row["outcome"] == "accepted" and row["decision"]["p_value"] == pytest.approx(2 / 128, abs=0.01)
    assert row["decision"]["wins"] == 6 and row["decision"]["losses"] == 1
    assert row["decision"]["effect"] == pytest.approx((6 - 0.5) / 8)
    run = project.path / ".ecdysis" / "runs" / "run1" / "rounds" / "1"
    lines = (run / "extra" / "run1-r1x" / "trials.jsonl").read_text().splitlines()
    assert len(lines) == 21 and (run / "extra" / "incumbent" / "run1-r1ix" / "trials.jsonl").is_file()
    result.stdout.fnmatch_lines(
        [
            "*round 1: extra trials: 7 flipped task(s) x 3 trial(s) x 2 harnesses = 42 "
            "trial(s) (sub-runs run1-r1x, run1-r1ix)*",
            "*round 1: paired rule: accept: *(with 3 extra trial(s) on 7 flipped task(s))*",
        ]
    )


def test_extra_trials_need_the_paired_rule(pytester: pytest.Pytester) -> None:
    """An evolution under `strict` with extra trials is a usage error; a session that decides nothing (a
    validation sub-run, which never gets the outer `--ecdysis-accept`) reads the same ini keys and runs."""
    pytester.makepyfile("def test_x(): pass")
    plain = pytester.runpytest_subprocess(
        "-o", "ecdysis_accept_extra_trials=2", "-o", "ecdysis_accept=strict"
    )
    assert plain.ret == 0, plain.stderr.str()
    result = pytester.runpytest_subprocess(
        "-o", "ecdysis_accept_extra_trials=2", "--ecdysis-accept", "strict", "--ecdysis-evolve"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*ini key ecdysis_accept_extra_trials = 2 adds trials before a paired test: it needs "
            "--ecdysis-accept paired or sequential*"
        ]
    )


def test_extra_trials_are_skipped_when_they_cannot_help() -> None:
    """Off under strict or K = 0; skipped, with the reason, for a deterministic model (a rerun is
    byte-identical), when no task flipped, and when no task rose."""
    from types import SimpleNamespace

    from pytest_ecdysis.evolve.extra_trials import flipped_tasks, skip_reason, task_score
    from pytest_ecdysis.gate.acceptance import decide

    def trials(rewards: list[float]) -> list[dict]:
        return [{"suite": "s", "task_id": str(i), "reward": r} for i, r in enumerate(rewards)]

    before, after, worse = trials([0.0, 1.0, 1.0]), trials([1.0, 1.0, 0.0]), trials([0.0, 0.0, 1.0])
    assert flipped_tasks(before, after) == ["s/0", "s/2"] and task_score(after) == pytest.approx(2 / 3)
    first = decide("paired", 2 / 3, 2 / 3, before, after)
    cfg = SimpleNamespace(
        accept="paired", accept_extra_trials=2, model="sim", user_model="sim", sim_nonce=None
    )
    assert skip_reason(cfg, {}, flipped_tasks(before, after), first) is None
    assert (
        skip_reason(SimpleNamespace(**{**vars(cfg), "accept_extra_trials": 0}), {}, ["s/0"], first) == "off"
    )
    # a fixed nonce does not switch the extra trials off: they are drawn at later trial indices
    assert skip_reason(SimpleNamespace(**{**vars(cfg), "sim_nonce": "ci"}), {}, ["s/0"], first) is None
    assert skip_reason(cfg, {}, [], first) == "no task flipped"
    assert skip_reason(cfg, {}, ["s/1"], decide("paired", 2 / 3, 1 / 3, before, worse)).startswith(
        "no task rose"
    )
