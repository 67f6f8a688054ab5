"""The built-in editor's prompt (`edit.prompt`): the spec's files in full, the rest by name, fitted to
ini `ecdysis_editor_context`; what the model was shown is recorded, and a prompt that cannot fit makes no call."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from pytest_ecdysis.edit.editors import EDITOR_SYSTEM, BuiltinEditor, _source_files
from pytest_ecdysis.edit.prompt import build_prompt, estimate_tokens, named_files
from pytest_ecdysis.endpoint.role_client import Completion
from pytest_ecdysis_tau2 import example_harness

BLOCK = "mod.py\n<<<<<<< SEARCH\nLEVEL = 1\n=======\nLEVEL = 2\n>>>>>>> REPLACE\n"
EXAMPLE = Path(example_harness.__file__).parent


class RecordingClient:
    """Answers with `replies` in turn and keeps every request's messages."""

    def __init__(self, *replies: str) -> None:
        self.replies, self.requests = list(replies), []

    def complete(self, role, messages, **kw):
        self.requests.append([dict(m) for m in messages])
        return Completion(self.replies.pop(0), {"prompt": 10, "completion": 5, "total": 15}, 0.0)


def _spec(tmp_path: Path, *files: str) -> Path:
    path = tmp_path / "spec.json"
    changes = [{"component": "policy_prompt", "files": list(files), "description": "d"}] if files else []
    path.write_text(json.dumps({"summary": "s", "changes": changes}))
    return path


def _harness(tmp_path: Path, big: int = 0) -> Path:
    h = tmp_path / "h"
    h.mkdir()
    (h / "__init__.py").write_text("from .mod import LEVEL\n\ndef build_agent(**kw):\n    return None\n")
    (h / "mod.py").write_text("LEVEL = 1\n")
    (h / "big.py").write_text("# filler line of a large module\n" * big)
    (h / "notes.txt").write_text("style notes\n")
    return h


def test_only_the_files_the_spec_names_are_shown_the_rest_listed(tmp_path: Path) -> None:
    """A spec naming mod.py: the model gets mod.py in full, every other harness file by name only (none of
    their contents), and `edit.json`'s record says which was which."""
    h = _harness(tmp_path, big=50)
    client = RecordingClient(BLOCK)
    result = BuiltinEditor(SimpleNamespace(), client=client).edit(
        None, h, spec_path=_spec(tmp_path, "mod.py")
    )
    assert result.ok and (h / "mod.py").read_text() == "LEVEL = 2\n"
    prompt = client.requests[0][1]["content"]
    assert (
        "```python\nLEVEL = 1\n```" in prompt and "filler line" not in prompt and "build_agent" not in prompt
    )
    assert "- big.py (" in prompt and "- __init__.py (" in prompt and "- notes.txt (12 bytes)" in prompt
    assert result.prompt["shown"] == ["mod.py"]
    assert result.prompt["listed"] == ["__init__.py", "big.py", "notes.txt"]
    assert "the spec names 1 file(s), 1 of the harness" in result.detail


def test_a_spec_that_names_no_file_gets_every_source_file_and_says_so(tmp_path: Path) -> None:
    """No file named (or only files the harness lacks): every Python file is shown, as before, and the
    record and the result's detail say why; a named file to create is pointed out."""
    h = _harness(tmp_path, big=2)
    result = BuiltinEditor(SimpleNamespace(), client=RecordingClient(BLOCK)).edit(
        None, h, spec_path=_spec(tmp_path)
    )
    assert result.prompt["shown"] == ["__init__.py", "big.py", "mod.py"] and result.prompt["listed"] == [
        "notes.txt"
    ]
    assert "the spec names no file: all 3 Python source file(s) shown" in result.detail
    prompt = build_prompt(_spec(tmp_path, "skills.py").read_text(), h, _source_files(h))
    assert prompt.missing == ["skills.py"] and "create them with an empty SEARCH): skills.py" in prompt.text
    assert prompt.note.startswith("the spec names only files the harness does not have: all 3")


def test_files_are_fitted_to_the_editor_context(tmp_path: Path) -> None:
    """With ecdysis_editor_context a named file that does not fit is listed instead of shown; the prompt's
    estimate stays within the context less the reply's share."""
    h = _harness(tmp_path, big=400)  # ~12,800 characters: ~4,300 estimated tokens
    spec = _spec(tmp_path, "mod.py", "big.py").read_text()
    prompt = build_prompt(spec, h, _source_files(h), context_tokens=2048, system_prompt=EDITOR_SYSTEM)
    assert prompt.shown == ["mod.py"] and prompt.left_out == ["big.py"] and "big.py" in prompt.listed
    assert "1 not shown: they do not fit the editor's context of 2048 tokens" in prompt.note
    assert prompt.tokens_estimate + estimate_tokens(EDITOR_SYSTEM) <= 2048 - 512
    roomy = build_prompt(spec, h, _source_files(h), context_tokens=32768, system_prompt=EDITOR_SYSTEM)
    assert roomy.shown == ["mod.py", "big.py"] and not roomy.left_out


def test_no_call_when_not_one_named_file_fits(tmp_path: Path) -> None:
    """Every named file too long for the context: no model call, ok False with the reason and the fix,
    files untouched, zero calls counted (the round's editor_calls)."""
    h = _harness(tmp_path, big=400)
    client = RecordingClient(BLOCK)
    editor = BuiltinEditor(SimpleNamespace(editor_context_tokens=2048), client=client)
    result = editor.edit(None, h, spec_path=_spec(tmp_path, "big.py"))
    assert not result.ok and result.calls == 0 and client.requests == []
    assert "not one of the spec's files fits the editor's context of 2048 tokens" in result.detail
    assert "raise ecdysis_editor_context" in result.detail and result.prompt["left_out"] == ["big.py"]


def test_the_example_harness_prompt_for_one_file_is_a_fraction_of_the_whole() -> None:
    """The real example harness and the real-model script's spec (raise MAX_MODEL_CALLS in config.py): the
    prompt shows config.py alone and is under a quarter of the whole-harness prompt (24,582 characters,
    6,557 SmolLM2 tokens measured, docs/real-model.md) that a small model could not read in 25 minutes."""
    spec = json.dumps(
        {
            "summary": "s",
            "changes": [
                {
                    "component": "trajectory_regulation",
                    "files": ["config.py"],
                    "description": "Raise MAX_MODEL_CALLS by ten.",
                }
            ],
        }
    )
    files = [p for p in _source_files(EXAMPLE) if "__pycache__" not in p.parts]
    one = build_prompt(spec, EXAMPLE, files)
    whole = build_prompt(json.dumps({"summary": "s", "changes": []}), EXAMPLE, files)
    assert one.shown == ["config.py"] and "MAX_MODEL_CALLS" in one.text
    assert len(whole.shown) == len([p for p in files if p.suffix == ".py"])
    assert one.chars * 4 < whole.chars


def test_named_files_reads_any_spec_text() -> None:
    """Paths in order without repeats; text that is not a spec names nothing (never raises)."""
    spec = {"changes": [{"files": ["a.py", "/b.py"]}, {"files": ["a.py", " c.md "]}, {"files": "x"}, "y"]}
    assert named_files(json.dumps(spec)) == ["a.py", "b.py", "c.md"]
    assert named_files("not json") == named_files("[1]") == named_files('{"changes": 3}') == []


def test_the_editor_asks_for_at_most_the_replys_share_of_the_context() -> None:
    """With ecdysis_editor_context the editor's max_tokens is the reply's share (a quarter, at least 512):
    a model that repeats itself stops there instead of at the client's 4,096 tokens."""
    cfg = SimpleNamespace(
        editor_context_tokens=8192,
        diagnosis_model="m",
        base_url="http://127.0.0.1:9/v1",
        editor_budget_s=60.0,
        call_timeout_s=10.0,
        max_retries=0,
    )
    assert BuiltinEditor(cfg).client.max_tokens == 2048
    assert (
        BuiltinEditor(SimpleNamespace(**{**vars(cfg), "editor_context_tokens": 1024})).client.max_tokens
        == 512
    )
    assert (
        BuiltinEditor(SimpleNamespace(**{**vars(cfg), "editor_context_tokens": 0})).client.max_tokens == 4096
    )
