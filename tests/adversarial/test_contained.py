"""The editor contained like a harness, and no secret in any file the tool writes.

Scripted `cmd:` editors against the tiny suite of `test_routes` in a temporary git repository, run the way
users run evolution: a `setsid` daemon ends with the editor; an fsmonitor and a hook planted in the shared
`.git` are an integrity error, never run, and are put back; a canary key the editor and the harness can
see appears in no file under the run directory.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_routes import _digests, _evolve, _nothing_gained, project  # noqa: F401 - the fixture
from tiny_evolution import git

from pytest_ecdysis.edit import contain

pytest_plugins = ["pytester"]
CANARY = "sk-canary-27-0123456789abcdef"


@pytest.fixture
def repo(project: pytest.Pytester) -> pytest.Pytester:  # noqa: F811 - test_routes' project, by another name
    return project


def _hooks(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / ".git" / "hooks").iterdir())}


@pytest.mark.slow
def test_a_setsid_daemon_ends_with_the_editor(repo: pytest.Pytester) -> None:
    """A helper the editor started in its own session (it left the editor's process group) is ended with
    the editor: it never writes its marker or touches the checkout."""
    before = _digests(repo.path)
    result, doc = _evolve(repo, ["daemon"])
    assert result.ret == 0, result.stdout.str()
    time.sleep(4)  # twice the daemon's delay
    assert not (repo.path / "daemon-ran").exists()
    _nothing_gained(repo, doc, before)


def test_the_marker_scan_alone_ends_a_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a PID namespace (unshare missing or not permitted), the per-call environment marker still
    finds and ends a `setsid` daemon."""
    from pytest_ecdysis.edit.contain import run_in_group

    monkeypatch.setattr(contain, "namespace_prefix", lambda: None)
    marker = tmp_path / "escaped"
    code, _ = run_in_group(
        ["sh", "-c", f"setsid sh -c 'sleep 1.5; touch {marker}' </dev/null >/dev/null 2>&1 &"],
        cwd=tmp_path,
        timeout_s=30,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert code == 0
    time.sleep(3)
    assert not marker.exists()


@pytest.mark.slow
def test_git_config_and_hooks_planted_by_the_editor(repo: pytest.Pytester) -> None:
    """An editor that sets `core.fsmonitor` in the shared `.git/config` and plants a `post-checkout` hook
    (with an improvement, LEVEL 3): the round is refused as an integrity error naming both, the evolution
    stops, neither program ever runs, and `.git/config` and the hooks are byte-identical afterwards."""
    before, hooks = _digests(repo.path), _hooks(repo.path)
    result, doc = _evolve(repo, ["git_config", "infra"])
    assert result.ret == 1, result.stdout.str()
    assert [r["outcome"] for r in doc["rounds"]] == ["guard_rejected"]
    reason = doc["rounds"][0]["reason"]
    assert "config changed" in reason and "hooks/post-checkout added" in reason, reason
    _nothing_gained(repo, doc, before)  # .git/config among the files compared
    assert _hooks(repo.path) == hooks
    git(repo.path, "status")  # what the user runs next
    git(repo.path, "switch", "-q", "-c", "after")
    git(repo.path, "switch", "-q", "main")
    assert not (repo.path / "fsmonitor-ran").exists() and not (repo.path / "hook-ran").exists()


def _written_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


@pytest.mark.slow
def test_a_canary_key_appears_in_no_written_file(
    repo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The starting harness reads the key at import (`NOTE`) and the suite writes it into a trial's notes and
    error; the editor prints the key it can see and writes it into the harness: the candidate is refused by
    the guard (it would be committed and shown in a pull request), and no file under the run directory,
    the GitHub job summary or the integrity ledger holds the key."""
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    step_summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    suite = repo.path / "test_tiny.py"
    suite.write_text(
        suite.read_text().replace(
            "tool_calls=[",
            "harness_notes=[{'kind': 'leak', 'detail': str(getattr(harness, 'NOTE', '')), 'step': 1}],\n"
            "        error=str(getattr(harness, 'NOTE', '')) or None,\n        tool_calls=[",
        )
    )
    init = repo.path / "tiny_harness" / "__init__.py"
    init.write_text(init.read_text() + "\nimport os\nNOTE = os.environ.get('OPENAI_API_KEY', '')\n")
    git(repo.path, "commit", "-qam", "notes")
    (repo.path / "no-static-check").write_text("")  # the layers behind the static check
    result, doc = _evolve(repo, ["canary"])
    assert result.ret == 0, result.stdout.str()
    assert doc["rounds"][0]["outcome"] == "guard_rejected", doc["rounds"][0]
    assert "carries a secret of this environment" in doc["rounds"][0]["reason"]
    assert "OPENAI_API_KEY" in doc["rounds"][0]["reason"] and CANARY not in doc["rounds"][0]["reason"]
    assert doc["branch"] is None
    run_dir = repo.path / ".ecdysis"
    files = _written_files(run_dir) + [step_summary]
    state = Path(str(repo.path.parent / f"{repo.path.name}-state"))
    files += _written_files(state) if state.is_dir() else []
    leaked = [str(p) for p in files if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert not leaked, leaked
    notes = [json.loads(line) for p in run_dir.rglob("trials.jsonl") for line in p.read_text().splitlines()]
    assert any("[redacted:OPENAI_API_KEY]" in json.dumps(t) for t in notes), (
        "the canary never reached a record"
    )
