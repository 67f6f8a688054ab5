"""The editor's file system is an allowlist (edit.contain.editor_sandbox), as the harness process's is: a
`cmd:` editor that memorises the answer key from *another* τ² install on the disk (a second checkout's venv)
finds none, since only the system directories, this interpreter, what its command runs, the candidate's
worktree, the repository's git directory and the paths named with `--ecdysis-editor-readable` and
`--ecdysis-editor-writable` are there. Before, the editor's sandbox bound the whole disk read-only with only
this interpreter's answer key covered, and such an editor wrote the 30 train tasks' gold actions into the
harness. Bad input: a writable path inside a git directory, a readable path that does not exist, an
executable the sandbox hides."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from test_sandbox import need_bwrap

from pytest_ecdysis.core.errors import UsageError
from pytest_ecdysis.edit import contain
from pytest_ecdysis.edit.editors import CommandEditor

#: The memorising editor: every `tasks.json` of an airline domain it can find under the roots it is given
#: is read and its gold actions written into the harness as a table keyed by task id.
MEMORISER = r"""
import json, os, sys
from pathlib import Path
harness, roots = Path(sys.argv[1]), sys.argv[2:]
table = {}
for root in roots:
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath.endswith("airline") and "tasks.json" in filenames:
            try:
                tasks = json.loads(Path(dirpath, "tasks.json").read_text())
            except (OSError, ValueError):
                continue
            for task in tasks:
                table[str(task["id"])] = (task.get("evaluation_criteria") or {}).get("actions")
(harness / "gold.py").write_text("GOLD = " + repr(table) + "\n")
"""


def _second_install(base: Path) -> Path:
    """A second checkout's venv with τ²'s airline tasks in it (the real file's bytes)."""
    from pytest_ecdysis.core.registry import answer_keys

    real = next(Path(k) for k in answer_keys() if k.endswith("airline/tasks.json"))
    copy = base / "other-checkout" / ".venv" / "lib" / "python3.11" / "site-packages" / "tau2" / "data"
    copy = copy / "tau2" / "domains" / "airline" / "tasks.json"
    copy.parent.mkdir(parents=True)
    shutil.copy(real, copy)
    return copy


@pytest.mark.parametrize("where", ["tmp", "home"])
def test_a_memorising_editor_finds_no_other_tau2_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    need_bwrap()
    monkeypatch.setenv(contain.SANDBOX_ENV, "1")
    monkeypatch.delenv(contain.WRITABLE_ENV, raising=False)
    monkeypatch.delenv("ECDYSIS_EDITOR_READABLE", raising=False)  # contain.READABLE_ENV
    if where == "home":  # a second checkout under the home directory
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        base = tmp_path / "home"
    else:
        base = tmp_path / "elsewhere"
    copy = _second_install(base)
    assert len(json.loads(copy.read_text())) >= 30
    work = tmp_path / "work"
    (work / "harness").mkdir(parents=True)
    agent = tmp_path / "agent" / "memorise.py"
    agent.parent.mkdir()
    agent.write_text(MEMORISER)
    roots = [str(base), str(tmp_path), "/tmp", str(Path.home())]
    result = CommandEditor(f"{sys.executable} {agent} {{harness}} " + " ".join(roots)).edit(
        None, work / "harness", spec_path=work / "spec.json"
    )
    assert result.ok, result.detail
    assert (work / "harness" / "gold.py").read_text() == "GOLD = {}\n"  # no answer key anywhere it looked


def test_what_the_user_names_readable_is_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--ecdysis-editor-readable PATH` (an agent's config, its credentials for its model): readable, not
    writable; the rest of the home directory is not there."""
    from pytest_ecdysis.edit.contain import run_in_group

    need_bwrap()
    monkeypatch.setenv(contain.SANDBOX_ENV, "1")
    monkeypatch.delenv(contain.WRITABLE_ENV, raising=False)
    monkeypatch.delenv(contain.READABLE_ENV, raising=False)
    conf, other, work = tmp_path / "conf", tmp_path / "other", tmp_path / "work"
    for d in (conf, other, work):
        d.mkdir()
    (conf / "key").write_text("k")
    (other / "secret").write_text("s")
    paths = [str(conf / "key"), str(other / "secret")]  # in the code, not as arguments (those are shown)
    probe = (
        f"import json, sys; out = {{}}; paths = {paths!r}\n"
        "for p in paths:\n"
        "    try: out[p] = open(p).read()\n"
        "    except OSError as e: out[p] = type(e).__name__\n"
        "try: open(paths[0], 'a').write('x'); out['write'] = 'ok'\n"
        "except OSError as e: out['write'] = type(e).__name__\n"
        "print(json.dumps(out))"
    )
    code, out = run_in_group(
        [sys.executable, "-c", probe],
        cwd=work,
        timeout_s=60,
        env={"PATH": "/usr/bin:/bin"},
        readable_dirs=(str(conf),),
    )
    seen = json.loads(out.strip().splitlines()[-1])
    assert code == 0, out
    assert seen == {str(conf / "key"): "k", str(other / "secret"): "FileNotFoundError", "write": "OSError"}


def test_an_executable_the_sandbox_hides_gets_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editor whose executable lies in a covered directory: one line naming the path and the option."""
    need_bwrap()
    monkeypatch.setenv(contain.SANDBOX_ENV, "1")
    monkeypatch.delenv(contain.WRITABLE_ENV, raising=False)
    tools, work = tmp_path / "tools", tmp_path / "work"
    tools.mkdir()
    work.mkdir()
    tool = tools / "agent"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    monkeypatch.setenv(contain.HIDE_ENV, str(tools))  # covered, as a run directory or ~/.cache would be
    result = CommandEditor(f"{tool} {{spec}}").edit(None, work, spec_path=work / "spec.json")
    assert not result.ok
    assert result.detail.count("\n") == 0
    assert str(tool) in result.detail and "--ecdysis-editor-readable" in result.detail, result.detail


def test_bad_editor_paths_are_usage_errors(tmp_path: Path) -> None:
    from pytest_ecdysis.core.config import _readable, _writable

    git_dir = tmp_path / "repo" / ".git" / "objects"
    git_dir.mkdir(parents=True)
    (tmp_path / "repo" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    for inside in (git_dir, git_dir.parent):
        with pytest.raises(UsageError, match="lies inside the git directory"):
            _writable(str(inside))
    with pytest.raises(UsageError, match="is not an existing directory"):
        _writable(str(tmp_path / "missing"))
    with pytest.raises(UsageError, match="does not exist"):
        _readable(str(tmp_path / "missing"))
    assert _writable(str(tmp_path)) == (str(tmp_path),)
