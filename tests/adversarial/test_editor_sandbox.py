"""The editor's writes outside the candidate are prevented, not only detected (edit.contain, item 3): under the
session's sandbox decision a `cmd:` editor works in its worktree (files and `git add` into the candidate's
index) while its writes to the user's checkout, `.git/config`, hooks, refs, a venv-like tree and its caches
fail; what it sees stays readable (its config and credentials). Without the sandbox (`ECDYSIS_SANDBOX=0`)
the same writes land, and the integrity checks behind it are what stop the round (tests/adversarial/
test_contained.py, test_routes.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_safety_git import fingerprint, repo  # noqa: F401 - the fixture
from test_sandbox import need_bwrap

from pytest_ecdysis.edit import contain
from pytest_ecdysis.edit.editors import CommandEditor
from pytest_ecdysis.git import worktree as gitworktree
from pytest_ecdysis.validate import sandbox

ATTACKER = r"""
import json, os, subprocess, sys
from pathlib import Path

harness, report, targets = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
(harness / "b.py").write_text("B = 2\n")
subprocess.run(["git", "add", "-A"], check=True)
wrote, read = [], Path(targets["readable"]).read_text()
for target in targets["writes"]:
    try:
        with open(target, "a") as fh:
            fh.write("\n# planted\n")
        wrote.append(target)
    except OSError:
        pass
cache = Path.home() / ".cache" / "ecdysis-editor-probe"
try:
    cache.write_text("x")
    wrote.append(str(cache))
except OSError:
    pass
(harness / "report.json").write_text(json.dumps({"wrote": wrote, "read": read}))
"""


def test_the_decision_is_read_by_the_validate_name() -> None:
    assert contain.SANDBOX_ENV == sandbox.ENV_ON
    assert contain.HIDE_ENV == sandbox.ENV_HIDE  # what harness code cannot see, the editor cannot either


def test_a_writable_directory_given_stays_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--ecdysis-editor-writable DIR` (an agent's own state directory): writable in the sandbox, the rest not;
    a read-only failure of the editor is reported with what to do."""
    from pytest_ecdysis.edit.contain import run_in_group

    need_bwrap()
    monkeypatch.setenv(contain.SANDBOX_ENV, "1")
    monkeypatch.delenv(contain.WRITABLE_ENV, raising=False)
    work, state, other = (tmp_path / n for n in ("work", "state", "other"))
    for d in (work, state, other):
        d.mkdir()
    script = f"open({str(state / 's')!r}, 'w').write('1'); open({str(other / 'o')!r}, 'w').write('1')"
    code, out = run_in_group(
        [sys.executable, "-c", script],
        cwd=work,
        timeout_s=60,
        env={"PATH": "/usr/bin:/bin"},
        writable=(str(state),),
    )
    assert (state / "s").read_text() == "1" and not (other / "o").exists()
    assert code == 1 and "No such file or directory" in out  # not in the editor's file system at all
    editor = CommandEditor(f"{sys.executable} -c \"open({str(other / 'o')!r}, 'w')\"")
    result = editor.edit(None, work, spec_path=work / "spec.json")
    assert not result.ok and "--ecdysis-editor-writable DIR" in result.detail, result.detail


@pytest.mark.parametrize("on", [True, False], ids=["sandbox", "no-sandbox"])
def test_writes_outside_the_candidate_are_prevented(
    repo: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    on: bool,
) -> None:
    if on:
        need_bwrap()
    monkeypatch.setenv(contain.SANDBOX_ENV, "1" if on else "0")
    monkeypatch.delenv(contain.WRITABLE_ENV, raising=False)  # (tests/conftest.py opens the test tree)
    venv = tmp_path_factory.mktemp("venv-like")
    (venv / "site.py").write_text("S = 1\n")
    agent = tmp_path_factory.mktemp("agent") / "agent.py"
    agent.write_text(ATTACKER)
    secret = repo / ".git" / "description"  # something of the user's it may read
    targets = {
        "readable": str(secret),
        "writes": [
            str(repo / "suite.py"),
            str(repo / ".git" / "config"),
            str(repo / ".git" / "hooks" / "post-checkout"),
            str(repo / ".git" / "refs" / "heads" / "main"),
            str(venv / "site.py"),
        ],
    }
    before = fingerprint(repo)
    config, site = (repo / ".git" / "config").read_bytes(), (venv / "site.py").read_bytes()
    wt = gitworktree.add_worktree(repo / "harness")
    try:
        result = CommandEditor(f"{sys.executable} {agent} {{harness}} x '{json.dumps(targets)}'").edit(
            None, wt.harness_dir, spec_path=repo / "spec.json"
        )
        assert result.ok, result.detail
        report = json.loads((wt.harness_dir / "report.json").read_text())
        assert sorted(wt.changed_paths()) == [
            "harness/b.py",
            "harness/report.json",
        ]  # staged in its own index
    finally:
        wt.remove()
    assert report["read"] == secret.read_text()
    if on:
        assert report["wrote"] == [
            str(Path.home() / ".cache" / "ecdysis-editor-probe")
        ]  # its own fresh cache
        assert fingerprint(repo) == before
        assert (repo / ".git" / "config").read_bytes() == config and (venv / "site.py").read_bytes() == site
        assert not (repo / ".git" / "hooks" / "post-checkout").exists()
        assert not (Path.home() / ".cache" / "ecdysis-editor-probe").exists()  # a fresh cache, thrown away
    else:  # the layer behind: these land, and validate.integrity must catch them (other tests)
        assert str(repo / "suite.py") in report["wrote"] and str(venv / "site.py") in report["wrote"]
        (Path.home() / ".cache" / "ecdysis-editor-probe").unlink(missing_ok=True)


def test_the_editor_reads_its_spec_but_no_answer_key_or_run_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the session covers for harness code is covered for the editor too: the suites' answer keys (τ²'s
    task files, through `ecdysis_answer_keys`) and the run directories; the spec it is handed, inside the run
    directory, stays readable. A `cmd:` editor that read τ²'s gold actions could write them into the harness."""
    from pytest_ecdysis.core.registry import answer_keys

    need_bwrap()
    keys = answer_keys()
    assert any(k.endswith("airline/tasks.json") for k in keys), keys  # the τ² suite declares its gold tasks
    monkeypatch.setenv(contain.SANDBOX_ENV, "1")
    monkeypatch.delenv(contain.WRITABLE_ENV, raising=False)
    runs, work = tmp_path / "runs", tmp_path / "work"
    (runs / "run1" / "rounds" / "1").mkdir(parents=True)
    work.mkdir()
    spec = runs / "run1" / "rounds" / "1" / "spec.json"
    spec.write_text('{"changes": []}')
    (runs / "run1" / "trials.jsonl").write_text('{"reward": 1.0}')
    monkeypatch.setenv(contain.HIDE_ENV, ":".join([str(runs), *keys]))
    probe = (
        "import json, sys; out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try: out[p] = len(open(p).read())\n"
        "    except OSError as e: out[p] = type(e).__name__\n"
        "print(json.dumps(out))"
    )
    gold = next(k for k in keys if k.endswith("airline/tasks.json"))
    targets = [str(spec), str(runs / "run1" / "trials.jsonl"), gold]
    code, out = contain.run_in_group(
        [sys.executable, "-c", probe, *targets],
        cwd=work,
        timeout_s=60,
        env={"PATH": "/usr/bin:/bin"},
        readable=(spec,),
    )
    assert code == 0, out
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen[str(spec)] == len('{"changes": []}')
    assert seen[str(runs / "run1" / "trials.jsonl")] == "FileNotFoundError"  # an empty directory there
    # /dev/null over the file (on a nodev mount: unreadable), or τ²'s whole data directory covered
    assert seen[gold] in (0, "PermissionError", "FileNotFoundError"), seen
    assert Path(gold).stat().st_size > 1000  # the real file is untouched, outside


@pytest.mark.parametrize("on", [True, False], ids=["sandbox", "no-sandbox"])
def test_the_editor_never_gets_the_ground_truth_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on: bool
) -> None:
    """The simulated server's ground-truth token (`ECDYSIS_SIM_TOKEN`, the trusted trial side's) is not in an
    editor command's environment, with or without the sandbox: with it an editor (which keeps the network)
    could read which quirks fired in which trial. Other variables (its own credentials) pass."""
    if on:
        need_bwrap()
    monkeypatch.setenv(contain.SANDBOX_ENV, "1" if on else "0")
    monkeypatch.delenv(contain.WRITABLE_ENV, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    probe = "import json, os; print(json.dumps(sorted(k for k in os.environ if k in ('ECDYSIS_SIM_TOKEN', 'MY_KEY'))))"
    code, out = contain.run_in_group(
        [sys.executable, "-c", probe],
        cwd=work,
        timeout_s=60,
        env={"PATH": "/usr/bin:/bin", "ECDYSIS_SIM_TOKEN": "t0ken", "MY_KEY": "k"},
    )
    assert code == 0, out
    assert json.loads(out.strip().splitlines()[-1]) == ["MY_KEY"]
