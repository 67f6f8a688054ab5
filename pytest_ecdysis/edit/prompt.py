"""The built-in editor's prompt: the spec, the harness files it names in full, the rest by name.

A whole harness is thousands of tokens (the example harness: 24,582 characters, 6,557 SmolLM2 tokens,
docs/real-model.md), more than a small model reads in the time of a call or holds in its context. The
prompt therefore shows in full only the files the spec's changes name (`SpecChange.files`) and lists every
other harness file by path and size; a spec that names no existing harness file gets every Python source
file, as before, and the record says so. With ini `ecdysis_editor_context = TOKENS` (the editor model's
context window) the shown files are also cut to what fits: files that do not fit are listed instead, and
when not one named file fits there is no call at all (`EditorPrompt.problem`).

Token counts here are estimates from characters (`CHARS_PER_TOKEN`), never a tokenizer's. This module
reads files only; it must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Characters per token assumed when fitting the prompt to a context. Measured on SmolLM2's tokenizer:
#: 3.75 on the example harness's source (24,582 characters, 6,557 tokens) and 3.65-3.71 on role prompts
#: (docs/real-model.md); 3.0 leaves room for tokenizers that split code finer.
CHARS_PER_TOKEN = 3.0
#: Share of the context kept for the reply (edit blocks) and the repair turn, at least `MIN_REPLY_TOKENS`.
REPLY_SHARE = 0.25
MIN_REPLY_TOKENS = 512


def estimate_tokens(text: str) -> int:
    """Tokens of `text` estimated from its length (`CHARS_PER_TOKEN`); an upper-side guess, not a count."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def reply_tokens(context_tokens: int) -> int:
    """The reply's share of a context of `context_tokens` (`REPLY_SHARE`, at least `MIN_REPLY_TOKENS`): the
    editor's `max_tokens` when ini `ecdysis_editor_context` is set (a small model that repeats itself to the
    limit then stops there: SmolLM2 wrote 4,096 tokens of one repeated sentence in 456 s, docs/real-model.md)."""
    return max(MIN_REPLY_TOKENS, int(context_tokens * REPLY_SHARE))


def prompt_room(context_tokens: int, system_prompt: str) -> int:
    """Estimated tokens left for the user prompt in a context of `context_tokens`: the context less the
    reply's share (`reply_tokens`) and the system prompt; 0 when none is left."""
    return max(0, context_tokens - reply_tokens(context_tokens) - estimate_tokens(system_prompt))


@dataclass
class EditorPrompt:
    """One editor prompt and its record (`edit.json`'s `prompt`): which files the model saw.

    `shown`: files given in full; `listed`: other harness files, by name only; `left_out`: files the spec
    names that did not fit the context (listed too); `missing`: files the spec names that the harness does
    not have (the model may create them); `note`: how the files were chosen, in words; `problem`: why no
    call should be made (None: make it).
    """

    text: str
    shown: list[str] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    note: str = ""
    problem: str | None = None
    chars: int = 0
    tokens_estimate: int = 0
    context_tokens: int = 0

    def record(self) -> dict[str, Any]:
        """The record without the prompt's text (it is the spec plus files already on disk)."""
        data = asdict(self)
        del data["text"]
        return data


def named_files(spec_json: str) -> list[str]:
    """The paths the spec's changes name (`changes[].files`), in order, without repeats; [] for a spec
    that names none or is not a JSON object of that shape."""
    try:
        spec = json.loads(spec_json)
    except ValueError:
        return []
    changes = spec.get("changes") if isinstance(spec, dict) else None
    out: list[str] = []
    for change in changes if isinstance(changes, list) else []:
        files = change.get("files") if isinstance(change, dict) else None
        for name in files if isinstance(files, list) else []:
            rel = str(name).strip().strip("/")
            if rel and rel not in out:
                out.append(rel)
    return out


def _block(rel: str, text: str) -> str:
    lang = "python" if rel.endswith(".py") else ""
    return f"\n{rel}\n```{lang}\n{text}{'' if text.endswith(chr(10)) else chr(10)}```"


def build_prompt(
    spec_json: str, harness_dir: Path, files: list[Path], *, context_tokens: int = 0, system_prompt: str = ""
) -> EditorPrompt:
    """The editor's user prompt for the spec text `spec_json` over `files` (the harness's files, relative
    to `harness_dir`). `context_tokens` 0: no context limit (only the spec's choice of files).
    """
    rels = [p.relative_to(harness_dir).as_posix() for p in files]
    texts: dict[str, str] = {}
    for rel in rels:
        try:
            texts[rel] = (harness_dir / rel).read_text()
        except (UnicodeDecodeError, OSError):
            pass  # a binary file is never shown, only listed
    named = named_files(spec_json)
    wanted = [rel for rel in named if rel in texts]
    missing = [rel for rel in named if rel not in rels]
    from_spec = bool(wanted)
    if from_spec:
        note = f"the spec names {len(named)} file(s), {len(wanted)} of the harness: shown in full"
    else:
        wanted = [rel for rel in rels if rel.endswith(".py") and rel in texts]
        note = (
            "the spec names no file" if not named else "the spec names only files the harness does not have"
        ) + f": all {len(wanted)} Python source file(s) shown"
    head = f"Modification spec:\n{spec_json}\n"
    room = prompt_room(context_tokens, system_prompt) if context_tokens else 0
    shown, left_out, body = [], [], []
    used = estimate_tokens(head) + sum(estimate_tokens(rel) + 6 for rel in rels) + 50  # + the file list
    for rel in wanted:
        block = _block(rel, texts[rel])
        cost = estimate_tokens(block) + estimate_tokens(rel) + 10
        if context_tokens and used + cost > room:
            left_out.append(rel)
            continue
        shown.append(rel)
        body.append(block)
        used += cost
    listed = [rel for rel in rels if rel not in shown]
    parts = [head]
    if missing:
        parts.append(
            "Files the spec names that do not exist yet (create them with an empty SEARCH): "
            + ", ".join(missing)
        )
    parts.append("Harness files shown in full:" if shown else "No harness file is shown in full.")
    parts.extend(body)
    if listed:
        parts.append(
            "\nOther harness files (not shown; edit them only if the spec requires it):\n"
            + "\n".join(f"- {rel} ({(harness_dir / rel).stat().st_size} bytes)" for rel in listed)
        )
    text = "\n".join(parts)
    prompt = EditorPrompt(
        text=text,
        shown=shown,
        listed=listed,
        left_out=left_out,
        missing=missing,
        note=note,
        chars=len(text),
        tokens_estimate=estimate_tokens(text),
        context_tokens=context_tokens,
    )
    if left_out:
        prompt.note += (
            f"; {len(left_out)} not shown: they do not fit the editor's context of {context_tokens} "
            f"tokens (ecdysis_editor_context): {', '.join(left_out)}"
        )
    if context_tokens and not shown and not missing:
        which = "the spec's files" if from_spec else "the harness's Python files"
        prompt.problem = (
            f"not one of {which} fits the editor's context of {context_tokens} tokens "
            f"(ecdysis_editor_context; about {room} tokens are left for files once the reply's "
            f"share is kept): {', '.join(left_out)}; raise ecdysis_editor_context to the model's "
            "real context, use a model with a longer one, or an external editor (cmd:)"
        )
    return prompt
