"""The built-in editor (LLM edit blocks), the `cmd:` editor, the static gold-data check and the
sub-run's argument handling, without a network."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from pytest_ecdysis.edit.editors import BuiltinEditor, CommandEditor, apply_edit_blocks, import_check
from pytest_ecdysis.endpoint.role_client import Completion
from pytest_ecdysis.validate.setup import strip_args, subrun_args

BLOCK = """mod.py
<<<<<<< SEARCH
LEVEL = 1
=======
LEVEL = {level}
>>>>>>> REPLACE
"""


class ScriptedClient:
    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.calls = 0

    def complete(self, role, messages, **kw):
        self.calls += 1
        return Completion(self.replies.pop(0), {"prompt": 10, "completion": 5, "total": 15}, 0.0)


def _harness(tmp_path: Path) -> Path:
    h = tmp_path / "h"
    h.mkdir()
    (h / "__init__.py").write_text("from .mod import LEVEL\n\ndef build_agent(**kw):\n    return None\n")
    (h / "mod.py").write_text("LEVEL = 1\n")
    (tmp_path / "spec.json").write_text('{"summary": "raise LEVEL", "changes": []}')
    return h


def test_edit_blocks_apply_and_refuse_outside(tmp_path: Path) -> None:
    """SEARCH/REPLACE blocks edit harness files; a path outside the harness is refused."""
    h = _harness(tmp_path)
    assert apply_edit_blocks(BLOCK.format(level=2), h) is None
    assert (h / "mod.py").read_text() == "LEVEL = 2\n"
    assert "outside" in apply_edit_blocks(BLOCK.format(level=3).replace("mod.py", "../x.py", 1), h)


def test_builtin_repairs_once_then_succeeds(tmp_path: Path) -> None:
    """A first answer that breaks the syntax gets one repair attempt; the repaired edit is kept; the result
    counts both model calls (the round's `editor_calls`)."""
    h = _harness(tmp_path)
    client = ScriptedClient(BLOCK.format(level="("), BLOCK.format(level=5))
    result = BuiltinEditor(SimpleNamespace(), client=client).edit(None, h, spec_path=tmp_path / "spec.json")
    assert result.ok and client.calls == 2 == result.calls and result.tokens["total"] == 30
    assert (h / "mod.py").read_text() == "LEVEL = 5\n"


def test_builtin_gives_up_and_restores(tmp_path: Path) -> None:
    """Two broken answers: the editor fails (no exception) and the files are as before."""
    h = _harness(tmp_path)
    client = ScriptedClient("no blocks here", BLOCK.format(level="import nothing_such_module"))
    result = BuiltinEditor(SimpleNamespace(), client=client).edit(None, h, spec_path=tmp_path / "spec.json")
    assert not result.ok and client.calls == 2 == result.calls
    assert (h / "mod.py").read_text() == "LEVEL = 1\n"


def test_cmd_editor_timeout_and_failure(tmp_path: Path) -> None:
    """An external editor that fails or times out is reported, not raised."""
    h = _harness(tmp_path)
    slow = CommandEditor(f"{sys.executable} -c 'import time; time.sleep(5)' {{spec}}", timeout_s=0.5)
    assert "timed out" in slow.edit(None, h, spec_path=tmp_path / "spec.json").detail
    bad = CommandEditor(f"{sys.executable} -c 'raise SystemExit(2)' {{spec}}")
    result = bad.edit(None, h, spec_path=tmp_path / "spec.json")
    assert not result.ok and "status 2" in result.detail


def test_subrun_args_drop_outer_options() -> None:
    """Sub-runs keep the suite arguments and xdist settings and drop evolution/gate/resume options."""
    args = [
        "pytest_ecdysis_tau2/test_airline.py",
        "-n",
        "2",
        "--ecdysis-evolve",
        "--ecdysis-rounds=2",
        "--ecdysis-resume",
        "r1",
        "--ecdysis-harness",
        "h",
        "--ecdysis-trials",
        "2",
        "-x",
    ]
    assert strip_args(args) == ["pytest_ecdysis_tau2/test_airline.py", "-n", "2", "--ecdysis-trials", "2"]
    out = subrun_args(
        args,
        harness_dir=Path("/c/h"),
        run_dir=Path("/r"),
        overrides={"--ecdysis-trials": "3", "--ecdysis-tasks": None},
    )
    assert out == [
        "pytest_ecdysis_tau2/test_airline.py",
        "-n",
        "2",
        "--ecdysis-harness",
        "/c/h",
        "--ecdysis-run-dir",
        "/r",
        "-o",
        "ecdysis_html=",
        "--ecdysis-trials",
        "3",
    ]


def test_import_check_covers_lazily_imported_modules(tmp_path: Path) -> None:
    """A module the package imports only lazily is checked too: a candidate broken there is reported."""
    h = _harness(tmp_path)
    assert import_check(h) is None
    (h / "agent.py").write_text("def broken(:\n")
    problem = import_check(h)
    assert problem and "SyntaxError" in problem
