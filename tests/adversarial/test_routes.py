"""Acceptance a candidate cannot game: each route to a false acceptance as a scripted `cmd:` editor (or the harness it
writes) against a tiny suite in a temporary git repository, run the way users run evolution.

The suite has four tasks; task i is solved when the harness constant `LEVEL` > i (score LEVEL/4), and a
harness with `INFRA = True` turns the tasks it fails into infrastructure errors. The incumbent has
LEVEL = 1 (0.25). In every test but the late rewrite (an honest improvement, whose committed bytes are
checked): no round is accepted, no recorded score changes, no branch is made, and the user's checkout
(files, index, refs) is byte-identical afterwards.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from tiny_evolution import CONFTEST, evolution, git, make_project, run_evolution

pytest_plugins = ["pytester"]

SUITE = """
import pytest
from pytest_ecdysis import TrialResult, record_trial
from pytest_ecdysis.core.harness import load_harness
from pytest_ecdysis.plugin import get_state


@pytest.mark.ecdysis_trial
@pytest.mark.parametrize("task_id", ["0", "1", "2", "3"])
def test_task(request, task_id):
    state = get_state(request.config)
    harness = load_harness(state.harness_dir)
    reward = 1.0 if int(task_id) < harness.LEVEL else 0.0
    reason = "agent_stop"
    if reward < 1.0 and getattr(harness, "INFRA", False):  # a harness that raises the client's timeout
        reward, reason = None, "infrastructure_error"
    record_trial(request.node, TrialResult(
        suite="tiny", task_id=task_id, trial=0, reward=reward, termination_reason=reason,
        components={"db": reward} if reward is not None else {}, harness_id=state.harness_id,
        tool_calls=[{"name": "book", "arguments": {"id": task_id}, "result": "error", "error": True}]))
    assert reward is not None and reward >= 1.0
"""

# The late writer (route "file rewritten after the editor exits"): an editor's own helpers no longer outlive
# it (PID namespace), so the writer runs in the controller, as an escaped process would: once the round's
# candidate.diff exists (the snapshot is taken), it rewrites the worktree's file and leaves a marker.
LATE_WRITER = """
import os, threading, time
def _late_writer():
    target, deadline = HERE / "late-target", time.time() + 300
    while time.time() < deadline:
        if target.exists() and list((HERE / ".ecdysis" / "runs" / "run1" / "rounds").glob("*/candidate.diff")):
            path = Path(target.read_text())
            path.write_text("LEVEL = 4  # late writer\\ndef build_agent(**kw):\\n    return None\\n")
            (HERE / "late-writer-ran").write_text(str(path))
            return
        time.sleep(0.05)
if os.environ.get("ECDYSIS_RUN_ID") == "run1" and (HERE / "late-target-armed").exists():
    threading.Thread(target=_late_writer, daemon=True).start()
"""

# The static check can be switched off by a file, to test the layers behind it on their own (as if the
# candidate had found a construct the check does not know).
NO_STATIC = """
import pytest_ecdysis.validate.static as staticcheck
if (HERE / "no-static-check").exists():
    staticcheck.check_candidate = lambda *a, **k: []
"""

EDITOR = r'''
import json, os, subprocess, sys, time
from pathlib import Path

spec_path, harness = Path(sys.argv[1]), Path(sys.argv[2])
kind = json.loads(spec_path.read_text())["changes"][0]["parameters"]["kind"]
init = harness / "__init__.py"
checkout = Path(subprocess.run(["git", "rev-parse", "--git-common-dir"], capture_output=True, text=True,
                               check=True).stdout.strip()).resolve().parent
outer = checkout / ".ecdysis" / "runs" / "run1"


def git(*args):
    subprocess.run(["git", *args], check=True, capture_output=True)


def later(seconds, code):
    """A helper that outlives the editor: its own session, so the editor's process group kill misses it."""
    subprocess.Popen([sys.executable, "-c", f"import time, os; time.sleep({seconds}); {code}"],
                     start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if kind == "commit_outside":  # committed edits of the suite and the harness (aider commits by default)
    (Path("test_tiny.py")).write_text("def test_task():\n    pass\n")
    init.write_text(init.read_text().replace("LEVEL = 1", "LEVEL = 4"))
    git("add", "-A")
    git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "editor commit")
elif kind == "commit_gold":  # a committed harness edit that reads the task file: the static check sees it
    init.write_text(init.read_text().replace("LEVEL = 1", "LEVEL = len(open('tasks.json').read())"))
    git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qam", "editor commit")
elif kind == "obfuscated":  # the gold path built from pieces, a dynamic import, an environment read
    init.write_text(init.read_text() + "\nimport importlib\nm = importlib.import_module('ta' + 'u2')\n"
                    "p = getattr(m, '__fi' + 'le__')\nk = __import__('o' + 's').environ.get('X')\n")
elif kind == "symlink":  # a link into the user's checkout (the suite)
    (harness / "suite.py").symlink_to(checkout / "test_tiny.py")
elif kind == "delete":  # the whole harness deleted
    for path in harness.rglob("*"):
        if path.is_file():
            path.unlink()
elif kind == "infra":  # the tasks it fails become infrastructure errors (left out of the denominator)
    init.write_text(init.read_text() + "\nINFRA = True\n")
elif kind == "late_rewrite":  # LEVEL 3 now; the controller-side LATE_WRITER rewrites it after the snapshot
    init.write_text(init.read_text().replace("LEVEL = 1", "LEVEL = 3"))
    (checkout / "late-target").write_text(str(init))
elif kind == "daemon":  # a `setsid` daemon that edits the checkout after the editor exited
    init.write_text(init.read_text() + "\n# reviewed\n")
    later(2, f"open({str(checkout / 'daemon-ran')!r}, 'w').write('escaped'); "
             f"open({str(checkout / 'test_tiny.py')!r}, 'a').write('# daemon')")
elif kind == "git_config":  # an fsmonitor for the loop's git commands, a hook for the user's next switch
    hook = checkout / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {checkout / 'hook-ran'}\n")
    hook.chmod(0o755)
    git("config", "core.fsmonitor", f"touch {checkout / 'fsmonitor-ran'}; false")
    init.write_text(init.read_text().replace("LEVEL = 1", "LEVEL = 3"))
elif kind == "canary":  # the key the editor can see, printed and written into the harness's notes
    key = os.environ.get("OPENAI_API_KEY", "none")
    init.write_text(init.read_text() + f"\nNOTE = {key!r}\n")
    print(f"editor log: using key {key}", file=sys.stderr)
elif kind == "patch_checkout":  # the checkout's suite made to pass everything, restored 20 s later
    suite = checkout / "test_tiny.py"
    original = suite.read_text()
    suite.write_text(original.replace("assert reward is not None and reward >= 1.0", "pass"))
    later(20, f"open({str(suite)!r}, 'w').write({original!r})")
    init.write_text(init.read_text() + "\n# reviewed\n")
elif kind == "forge_decision":  # the harness, when imported in the sub-run, forges round 2's decision
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    forged = {"round": {"round": 2, "outcome": "accepted", "accepted": True, "score_before": 0.25,
                        "score_after": 1.0, "reason": "forged"},
              "incumbent": {"commit": head, "harness_id": "x@forged", "score": 1.0, "run_path": str(outer)}}
    target = outer / "rounds" / "2" / "decision.json"
    init.write_text(init.read_text() + f"\nimport pathlib\npathlib.Path({str(target)!r}).parent.mkdir("
                    f"parents=True, exist_ok=True)\npathlib.Path({str(target)!r}).write_text({json.dumps(forged)!r})\n")
elif kind == "patch_copy":  # the harness rewrites the suite in the tree the sub-run runs from
    init.write_text(init.read_text() + "\nimport os, pathlib\np = pathlib.Path(os.getcwd()) / 'test_tiny.py'\n"
                    "if p.exists():\n    os.chmod(p, 0o644)\n    p.write_text(p.read_text() + '\\n# patched\\n')\n")
'''


#: files the test itself (or its scripted diagnosis) writes in the project
TEST_FILES = ("stdout", "stderr", "runpytest-current", "script.json", "diagnose.log")


def _digests(root: Path) -> dict[str, str]:
    """Every file of the user's checkout except the run directory and pytester's own files."""
    skip = {".ecdysis", "__pycache__", ".git", ".pytest_cache"}  # the outer session's own files
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if skip & set(rel.parts) or not path.is_file() or rel.name in TEST_FILES:
            continue
        out[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    git_dir = root / ".git"
    status = git(root, "status", "--porcelain", "--untracked-files=all").splitlines()
    out["status"] = "\n".join(x for x in status if x[3:] not in TEST_FILES)
    for name in ("HEAD", "config", "packed-refs"):
        if (git_dir / name).is_file():
            out[".git/" + name] = hashlib.sha256((git_dir / name).read_bytes()).hexdigest()
    out["refs"] = git(root, "for-each-ref", "--format=%(refname) %(objectname)")
    return out


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # (the scripted diagnosis sets `pytest_ecdysis.diagnose.round`: the package is imported first)
    project = make_project(
        pytester,
        monkeypatch,
        CONFTEST + NO_STATIC + LATE_WRITER,
        suite=SUITE,
        editor=EDITOR,
        ignore=("no-static-check", ".pytest_cache/", "late-*"),
        accept_ini=False,
    )
    monkeypatch.setenv("ECDYSIS_RUN_ID", "run1")
    return project


def _evolve(project: pytest.Pytester, kinds: list[str]) -> tuple[pytest.RunResult, dict]:
    (project.path / "script.json").write_text(json.dumps([{"kind": k} for k in kinds]))
    # the routes, not the rule: a tie is rejected at once (the sequential default would spend confirmation
    # looks on a 4-task suite first, and call it inconclusive)
    result = run_evolution(
        project, "--ecdysis-rounds", str(len(kinds)), "--ecdysis-accept", "strict", timeout=1800
    )  # six rounds of sub-runs on a loaded machine
    return result, evolution(project)


def _nothing_gained(project: pytest.Pytester, doc: dict, before: dict[str, str]) -> None:
    assert not any(r.get("accepted") for r in doc["rounds"]), doc["rounds"]
    assert doc["incumbent"]["score"] == 0.25 and doc["incumbent"]["round"] == 0
    assert doc["branch"] is None
    assert "ecdysis/" not in git(project.path, "branch", "--list")
    assert _digests(project.path) == before
    assert git(project.path, "worktree", "list").count("\n") == 1


@pytest.mark.slow
def test_routes_that_are_refused_round_by_round(project: pytest.Pytester) -> None:
    """Editor commits (outside the harness, or reading gold data), obfuscated reads, a symlink into the
    checkout, a deleted harness, failures turned into infrastructure errors: each round ends refused or
    rejected, with the reason, and evolution goes on."""
    before = _digests(project.path)
    kinds = ["commit_outside", "commit_gold", "obfuscated", "symlink", "delete", "infra"]
    result, doc = _evolve(project, kinds)
    assert result.ret == 0, result.stdout.str()
    outcomes = {k: (r["outcome"], r["reason"]) for k, r in zip(kinds, doc["rounds"], strict=True)}
    print(json.dumps(outcomes, indent=1))
    assert (
        outcomes["commit_outside"][0] == "guard_rejected" and "test_tiny.py" in outcomes["commit_outside"][1]
    )
    assert outcomes["commit_gold"][0] == "guard_rejected" and "tasks.json" in outcomes["commit_gold"][1]
    assert outcomes["obfuscated"][0] == "guard_rejected"
    for what in ("imports importlib", "computed attribute name", "calls __import__()"):
        assert what in outcomes["obfuscated"][1], outcomes["obfuscated"][1]
    assert outcomes["symlink"][0] == "guard_rejected" and "symlink" in outcomes["symlink"][1]
    assert outcomes["delete"][0] == "broken_candidate" and "__init__.py" in outcomes["delete"][1]
    assert outcomes["infra"][0] == "rejected" and "infrastructure drift" in outcomes["infra"][1]
    assert doc["rounds"][kinds.index("infra")]["score_after"] == 1.0  # its own figure, never compared
    _nothing_gained(project, doc, before)


@pytest.mark.slow
def test_file_rewritten_after_the_editor_exits_is_not_what_is_validated_or_committed(
    project: pytest.Pytester,
) -> None:
    """The editor raises LEVEL to 3 (an improvement, accepted); a late writer rewrites the file to LEVEL = 4
    after the snapshot was taken (its marker proves it ran): the validation scored the snapshot (0.75, not
    1.0) and the branch holds the snapshot's bytes, not the late writer's."""
    (project.path / "late-target-armed").write_text("")
    result, doc = _evolve(project, ["late_rewrite"])
    assert result.ret == 0, result.stdout.str()
    assert (project.path / "late-writer-ran").is_file(), "the late writer never ran: the test proves nothing"
    row = doc["rounds"][0]
    assert (row["outcome"], row["score_after"]) == ("accepted", 0.75), row
    committed = git(project.path, "show", f"{doc['branch']}:tiny_harness/__init__.py")
    assert "LEVEL = 3" in committed and "late writer" not in committed and "LEVEL = 4" not in committed
    assert doc["incumbent"]["score"] == 0.75


@pytest.mark.slow
def test_editor_patching_the_checkout_stops_evolution(project: pytest.Pytester) -> None:
    """An editor that patches the user's suite (and leaves a helper to restore it later) is caught right
    after its call: the round is refused with the file named and the evolution stops. The helper ended
    with the editor (its PID namespace), so the patch stays for the user to see and restore."""
    before = _digests(project.path)
    result, doc = _evolve(project, ["patch_checkout", "infra"])
    assert result.ret == 1, result.stdout.str()
    assert [r["outcome"] for r in doc["rounds"]] == ["guard_rejected"]
    assert "your checkout: test_tiny.py changed" in doc["rounds"][0]["reason"]
    result.stdout.fnmatch_lines(["*--ecdysis-evolve stopped*protected files changed*test_tiny.py*"])
    assert "assert reward is not None" not in (project.path / "test_tiny.py").read_text()  # not restored
    git(project.path, "checkout", "--", "test_tiny.py")  # what the message tells the user to do
    _nothing_gained(project, doc, before)


@pytest.mark.slow
def test_forged_checkpoint_is_refused(project: pytest.Pytester) -> None:
    """A rejected candidate that writes the next round's `decision.json` (accepted, no validation) from
    inside its sub-run is refused: the file has no digest in the controller's ledger, the evolution stops,
    and the forged round is never recorded (static check off: this tests the layer behind it)."""
    (project.path / "no-static-check").write_text("")
    before = _digests(project.path)
    result, doc = _evolve(project, ["forge_decision", "infra"])
    assert result.ret == 1, result.stdout.str()
    assert [r["outcome"] for r in doc["rounds"]] == ["rejected"]
    result.stdout.fnmatch_lines(
        ["*--ecdysis-evolve stopped*decision.json was not written by this evolution*"]
    )
    _nothing_gained(project, doc, before)


@pytest.mark.slow
def test_sub_run_patching_its_tree_stops_evolution(project: pytest.Pytester) -> None:
    """A harness that rewrites the suite in the tree its sub-run runs from (a private copy, read-only) is
    caught when the sub-run ends: refused, evolution stopped, the user's checkout untouched."""
    (project.path / "no-static-check").write_text("")
    before = _digests(project.path)
    result, doc = _evolve(project, ["patch_copy", "infra"])
    assert result.ret == 1, result.stdout.str()
    assert [r["outcome"] for r in doc["rounds"]] == ["guard_rejected"]
    assert "trusted copy" in doc["rounds"][0]["reason"] and "test_tiny.py" in doc["rounds"][0]["reason"]
    _nothing_gained(project, doc, before)
