"""Editors: what turns a modification spec into a code change of the harness (docs/evolution.md).

One protocol, three implementations, chosen by `--ecdysis-editor`:

- `builtin`: an LLM (the diagnosis model, through `pytest_ecdysis.endpoint.role_client`) answers with SEARCH/REPLACE
  edit blocks; its prompt shows the files the spec names and lists the rest, fitted to
  ini `ecdysis_editor_context` (`edit.prompt`); the blocks are applied to harness files, then a syntax and
  import check runs, with one repair attempt that shows the model the error; an empty reply, one with no usable edit block, a prompt longer
  than the model's context and a call that timed out all end as `ok=False` with the reason;
- `cmd:<template>`: an external coding agent (OpenCode, Aider, a script); `{spec}` becomes the path of
  `spec.json`, `{harness}` the candidate's harness directory; run with a timeout in the candidate
  worktree;
- `sim`: the simulated model's editor (`pytest_ecdysis.sim.editor.recipes`), applying recipes shipped beside
  the harness.

Whatever the editor, *the change is the diff of the harness directory* (computed by the loop in git);
an editor's own account of what it did is only reported. An editor never raises for a failed edit: it
returns an `EditResult` with `ok=False` and the reason, and the round ends as `no_change`.
This module must not import tau2, task suites or harness code in this process (import checks run in a
subprocess).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import ContextOverflowError, InfrastructureError, UsageError
from pytest_ecdysis.edit.contain import HINTED, READ_ONLY_HINT, SANDBOX_ENV, run_in_group
from pytest_ecdysis.edit.prompt import build_prompt, reply_tokens
from pytest_ecdysis.git.env import child_env

#: Seconds an external (`cmd:`) editor may run before it is stopped; env ECDYSIS_EDITOR_TIMEOUT overrides.
DEFAULT_CMD_TIMEOUT_S = 900.0
#: Seconds the import check of a candidate may take (importing tau2 takes a few seconds).
IMPORT_CHECK_TIMEOUT_S = 120.0


@dataclass
class EditResult:
    """One editor call. `ok` is False when the editor failed or timed out; `detail` says why or what it did."""

    ok: bool
    detail: str
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "completion": 0, "total": 0})
    wall_s: float = 0.0
    not_implementable: list[dict[str, str]] = field(default_factory=list)
    calls: int = 1  #: editor model calls made (the builtin editor's repair attempt is a second one)
    #: the builtin editor's prompt record (`edit.prompt.EditorPrompt.record`): files shown, listed, left out
    prompt: dict[str, Any] = field(default_factory=dict)


class Editor(Protocol):
    """Turns a spec into edits of the files under `harness_dir` (the candidate's copy, in a worktree)."""

    name: str

    def edit(self, spec: Any, harness_dir: Path, *, spec_path: Path) -> EditResult:
        """Edit files under `harness_dir` in place; `spec_path` is the saved `spec.json`."""
        ...


def check_editor(editor: str, harness_dir: Path) -> None:
    """Configure-time check of `--ecdysis-editor` against the harness.

    Raises:
        UsageError: `sim` with a harness that ships no recipes; a `cmd:` template without `{spec}`.
    """
    if editor == "sim":
        from pytest_ecdysis.sim.editor.recipes import check_usable

        check_usable(harness_dir)
    elif editor.startswith("cmd:") and "{spec}" not in editor:
        raise UsageError(
            "--ecdysis-editor cmd:<template> must pass the spec to the agent with the {spec} "
            'placeholder, e.g. "cmd:aider --yes --message-file {spec} {harness}"'
        )


def make_editor(cfg: EcdysisConfig) -> Editor:
    """The editor `cfg.editor` names (`builtin`, `sim`, `cmd:<template>`)."""
    if cfg.editor == "sim":
        return SimEditor()
    if cfg.editor.startswith("cmd:"):
        timeout = getattr(cfg, "editor_budget_s", None) or float(
            os.environ.get("ECDYSIS_EDITOR_TIMEOUT", DEFAULT_CMD_TIMEOUT_S)
        )
        return CommandEditor(
            cfg.editor[4:].strip(),
            timeout_s=timeout,
            writable=tuple(getattr(cfg, "editor_writable", ()) or ()),
            readable=tuple(getattr(cfg, "editor_readable", ()) or ()),
        )
    return BuiltinEditor(cfg)


def import_check(
    harness_dir: Path, timeout_s: float = IMPORT_CHECK_TIMEOUT_S, env: dict[str, str] | None = None
) -> str | None:
    """Import the harness and every module in it in a fresh interpreter (never in this process); None
    when all import and the package defines `build_agent`, else the error text; `env` is its environment
    (default: this process's; validation passes the scrubbed sub-run environment). Submodules are imported
    too because a harness may import them lazily (in `build_agent`)."""
    code = (
        "import importlib, pkgutil, sys; from pathlib import Path; "
        "from pytest_ecdysis.core.harness import load_harness; d = Path(sys.argv[1]); m = load_harness(d); "
        "[importlib.import_module(i.name) for i in pkgutil.walk_packages([str(d)], m.__name__ + '.')]"
    )
    env = dict(
        env if env is not None else child_env(),
        PYTHONDONTWRITEBYTECODE="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(harness_dir)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            cwd=harness_dir,
        )
    except subprocess.TimeoutExpired:
        return f"importing the harness took longer than {timeout_s:.0f} s"
    if proc.returncode == 0:
        return None
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    return lines[-1] if lines else f"exit status {proc.returncode}"


class SimEditor:
    """The simulated model's editor: recipes from `<harness_dir>/recipes/`, parameterised by the spec."""

    name = "sim"

    def edit(self, spec: Any, harness_dir: Path, *, spec_path: Path) -> EditResult:
        from pytest_ecdysis.sim.editor.recipes import apply_spec

        started = time.monotonic()
        result = apply_spec(spec, harness_dir)
        parts = []
        if result.applied:
            parts.append("applied recipe(s) " + ", ".join(result.applied))
        for item in result.not_implementable:
            parts.append(f"not implementable: {item['knob'] or '(no knob)'}: {item['reason']}")
        return EditResult(
            ok=True,
            detail="; ".join(parts) or "the spec has no changes",
            wall_s=time.monotonic() - started,
            not_implementable=result.not_implementable,
        )


class CommandEditor:
    """An external coding agent run as `template.format(spec=..., harness=...)` in the worktree root."""

    name = "cmd"

    def __init__(
        self,
        template: str,
        timeout_s: float = DEFAULT_CMD_TIMEOUT_S,
        writable: tuple[str, ...] = (),
        readable: tuple[str, ...] = (),
    ) -> None:
        self.template = template
        self.timeout_s = timeout_s
        self.writable = writable  # `--ecdysis-editor-writable`
        self.readable = readable  # `--ecdysis-editor-readable`

    def edit(self, spec: Any, harness_dir: Path, *, spec_path: Path) -> EditResult:
        command = self.template.replace("{spec}", shlex.quote(str(spec_path))).replace(
            "{harness}", shlex.quote(str(harness_dir))
        )
        started = time.monotonic()
        cwd = _worktree_root(harness_dir)
        try:
            returncode, out_text = run_in_group(
                shlex.split(command),
                cwd=cwd,
                timeout_s=self.timeout_s,
                env=child_env(PYTHONDONTWRITEBYTECODE="1"),
                writable=self.writable,
                readable=(spec_path.resolve(),),
                readable_dirs=self.readable,
            )
        except subprocess.TimeoutExpired:
            return EditResult(
                ok=False,
                detail=f"editor command timed out after {self.timeout_s:.0f} s (its "
                f"process group was ended): {command}",
                wall_s=time.monotonic() - started,
            )
        except OSError as exc:
            return EditResult(
                ok=False,
                detail=f"editor command could not start ({exc}): {command}",
                wall_s=time.monotonic() - started,
            )
        wall = time.monotonic() - started
        if returncode != 0 and (hidden := _hidden_executable(out_text)):
            return EditResult(ok=False, detail=hidden, wall_s=wall)
        if returncode != 0:
            tail = out_text.strip().splitlines()[-3:]
            sandboxed = os.environ.get(SANDBOX_ENV) == "1"
            hint = f" ({READ_ONLY_HINT})" if sandboxed and any(h in out_text for h in HINTED) else ""
            return EditResult(
                ok=False,
                detail=f"editor command exited with status {returncode}: " + " | ".join(tail) + hint,
                wall_s=wall,
            )
        return EditResult(ok=True, detail=f"ran {command}", wall_s=wall)


def _hidden_executable(out_text: str) -> str | None:
    """One line naming the executable bwrap could not start (`bwrap: execvp PATH: ...`: a path the
    editor's sandbox does not show, a venv under `~/.cache` say) and the option that shows it; None for any
    other failure."""
    match = re.search(r"bwrap: execvp (.+?): (No such file or directory|Permission denied)", out_text)
    if match is None:
        return None
    return (
        f"the editor's executable {match[1]} is not visible in the editor's sandbox ({match[2]}): name the "
        "directory it lives in with --ecdysis-editor-readable DIR (or pass --ecdysis-sandbox off)"
    )


def _worktree_root(harness_dir: Path) -> Path:
    for parent in [harness_dir, *harness_dir.parents]:
        if (parent / ".git").exists():
            return parent
    return harness_dir


# --- builtin: SEARCH/REPLACE edit blocks from the diagnosis model -----------------------------------

EDIT_BLOCK = re.compile(
    r"^(?P<path>[^\n`]+?)\s*\n(?:```[a-z]*\n)?<<<<<<< SEARCH\n(?P<search>.*?)^=======\n(?P<replace>.*?)^>>>>>>> REPLACE",
    re.DOTALL | re.MULTILINE,
)

EDITOR_SYSTEM = """You edit the source of an LLM agent's runtime harness to implement a modification spec.
Answer only with edit blocks, one per change, in exactly this form:

path/relative/to/harness.py
<<<<<<< SEARCH
lines copied exactly from the current file (empty to create a new file)
=======
the new lines
>>>>>>> REPLACE

Keep each change minimal; edit the harness files shown (the others are listed by name only: copy SEARCH
lines only from files you were shown); never read or mention the benchmark's task data or evaluator."""


class BuiltinEditor:
    """LLM edit blocks applied to the harness files, then a syntax and import check; one repair attempt."""

    name = "builtin"

    def __init__(self, cfg: EcdysisConfig, client: Any = None) -> None:
        self.cfg = cfg
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            from pytest_ecdysis.endpoint.role_client import RoleClient

            context = int(getattr(self.cfg, "editor_context_tokens", 0) or 0)  # ecdysis_editor_context
            extra = {"max_tokens": reply_tokens(context)} if context else {}
            # its budget: --ecdysis-limits editor-budget
            self._client = RoleClient.from_config(self.cfg, stage="editor", **extra)
        return self._client

    def edit(self, spec: Any, harness_dir: Path, *, spec_path: Path) -> EditResult:
        from pytest_ecdysis.endpoint.role_client import add_tokens

        started = time.monotonic()
        if hasattr(self.client, "restart_budget"):
            self.client.restart_budget()  # each round's edit has the whole editor budget
        tokens = {"prompt": 0, "completion": 0, "total": 0}
        prompt = build_prompt(
            spec_path.read_text(),
            harness_dir,
            _source_files(harness_dir),
            context_tokens=int(getattr(self.cfg, "editor_context_tokens", 0) or 0),
            system_prompt=EDITOR_SYSTEM,
        )
        record = prompt.record()
        if prompt.problem:
            return EditResult(
                ok=False,
                detail=prompt.problem,
                tokens=tokens,
                calls=0,
                prompt=record,
                wall_s=time.monotonic() - started,
            )
        messages = [{"role": "system", "content": EDITOR_SYSTEM}, {"role": "user", "content": prompt.text}]
        backup = {p: p.read_bytes() for p in _source_files(harness_dir)}
        problems: list[str] = []
        for attempt in (1, 2):
            try:
                reply = self.client.complete("editor", messages)
            except (ContextOverflowError, InfrastructureError) as exc:  # the round ends as no_change
                from pytest_ecdysis.diagnose.round import timed_out

                if isinstance(exc, InfrastructureError) and not timed_out(exc):
                    raise
                _restore(harness_dir, backup)
                return EditResult(
                    ok=False,
                    detail=f"editor call {attempt} failed: {exc}",
                    tokens=tokens,
                    wall_s=time.monotonic() - started,
                    calls=attempt,
                    prompt=record,
                )
            tokens = add_tokens(tokens, reply.tokens)
            problem = (
                "the reply was empty"
                if not reply.text.strip()
                else apply_edit_blocks(reply.text, harness_dir)
            ) or check_sources(harness_dir)
            if not problem:
                problem = import_check(harness_dir) or ""
            if problem and getattr(reply, "finish_reason", None) == "length":
                problem += (
                    f" (the reply was cut at the token limit after {reply.tokens.get('completion', 0)} "
                    "tokens: finish_reason 'length')"
                )
            problems.append(f"attempt {attempt}: {problem}")
            if not problem:
                return EditResult(
                    ok=True,
                    detail=f"applied edit blocks (attempt {attempt}; {prompt.note})",
                    tokens=tokens,
                    wall_s=time.monotonic() - started,
                    calls=attempt,
                    prompt=record,
                )
            if attempt == 1:
                messages += [
                    {"role": "assistant", "content": _echo(reply.text)},
                    {
                        "role": "user",
                        "content": f"That edit failed: {problem}\nThe files are as they "
                        "were before your edit. Answer with corrected edit blocks.",
                    },
                ]
                _restore(harness_dir, backup)
        _restore(harness_dir, backup)
        return EditResult(
            ok=False,
            detail=f"edit failed after one repair attempt: {'; '.join(problems)} ({prompt.note})",
            tokens=tokens,
            wall_s=time.monotonic() - started,
            calls=2,
            prompt=record,
        )


#: Characters of a failed answer shown back to the model in the repair turn; a longer one is cut (a small
#: model's 4,096-token repetition came back whole and made the repair prompt 4,959 tokens, docs/real-model.md).
REPAIR_ECHO_CHARS = 4000


def _echo(text: str) -> str:
    if len(text) <= REPAIR_ECHO_CHARS:
        return text
    return (
        text[:REPAIR_ECHO_CHARS]
        + f"\n[... {len(text) - REPAIR_ECHO_CHARS} more characters of this answer not shown]"
    )


def _source_files(harness_dir: Path) -> list[Path]:
    from pytest_ecdysis.core.harness import harness_files

    return [harness_dir / rel for rel in harness_files(harness_dir)]


def _restore(harness_dir: Path, backup: dict[Path, bytes]) -> None:
    for path in _source_files(harness_dir):
        if path not in backup:
            path.unlink()
    for path, data in backup.items():
        path.write_bytes(data)


def apply_edit_blocks(text: str, harness_dir: Path) -> str | None:
    """Apply SEARCH/REPLACE blocks to files under `harness_dir`; None on success, else the problem.

    A block whose path leaves the harness directory, or whose SEARCH text is not found exactly once,
    is a problem (nothing of that answer is then kept by the caller).
    """
    blocks = list(EDIT_BLOCK.finditer(text))
    if not blocks:
        return "the answer contains no edit block"
    root = harness_dir.resolve()
    for block in blocks:
        rel = block["path"].strip().strip("`").strip()
        target = (harness_dir / rel).resolve()
        if root not in target.parents:
            return f"{rel} is outside the harness directory"
        search, replace = block["search"], block["replace"]
        if not search:
            if target.exists():
                return f"{rel} exists; an empty SEARCH only creates new files"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(replace)
            continue
        if not target.is_file():
            return f"{rel} does not exist in the harness"
        current = target.read_text()
        count = current.count(search)
        if count != 1:
            return f"the SEARCH text for {rel} occurs {count} times in the file (it must occur exactly once)"
        target.write_text(current.replace(search, replace))
    return None


def check_sources(harness_dir: Path) -> str | None:
    """Compile every Python file of the harness; None when all compile, else the first syntax error."""
    for path in _source_files(harness_dir):
        if path.suffix == ".py":
            try:
                compile(path.read_text(), str(path), "exec")
            except SyntaxError as exc:
                return f"syntax error in {path.relative_to(harness_dir)} line {exc.lineno}: {exc.msg}"
    return None
