"""A candidate's changes for the ablation (ini `ecdysis_ablate`): hunks of its diff, and the candidate without some.

*A change* is one hunk of the candidate's diff against its base, with zero lines of context (a run of
added, removed or replaced lines; `difflib.SequenceMatcher` opcodes over the file's lines); a file the
candidate adds or deletes, or a symlink, is one change. Above `MAX_CHANGES` hunks, one change per changed
file (`ablation` does not ablate above `MAX_CHANGES` files). `changes_of(snap)` lists them in diff order
(files by path, hunks top to bottom); `without(snap, changes, dropped)` takes the dropped ones back to the
base bytes (no editor call). Pure functions of a `snapshot.Snapshot`; no git, model or suite work.
"""

from __future__ import annotations

import dataclasses
import difflib

from pytest_ecdysis.git import snapshot as gitsnapshot

#: Above this many hunks a change is a file; above this many files the candidate is not ablated.
MAX_CHANGES = 8


@dataclasses.dataclass(frozen=True)
class Change:
    """One change of a candidate: hunk `hunk` (0-based, within `file`; None: the whole file)."""

    file: str  #: harness-relative path
    hunk: int | None  #: index among the file's non-equal opcodes; None = the whole file
    header: str  #: `@@ -a,b +c,d @@` (zero context), or `new file` / `deleted file` / `whole file`
    diff: str  #: the hunk as unified-diff text (decoded with replacement)


def _lines(data: bytes | None) -> list[bytes]:
    return (data or b"").splitlines(keepends=True)


def _opcodes(base: bytes, cand: bytes) -> list[tuple[str, int, int, int, int]]:
    matcher = difflib.SequenceMatcher(None, _lines(base), _lines(cand), autojunk=False)
    return [op for op in matcher.get_opcodes() if op[0] != "equal"]


def _header(op: tuple[str, int, int, int, int]) -> str:
    """`@@ -a,b +c,d @@` of one opcode (1-based lines, zero context, as `git diff -U0` writes it)."""
    _, i1, i2, j1, j2 = op

    def span(start: int, end: int) -> str:
        n = end - start
        return f"{start if n == 0 else start + 1}" + ("" if n == 1 else f",{n}")

    return f"@@ -{span(i1, i2)} +{span(j1, j2)} @@"


def _text(name: str, base: bytes, cand: bytes, op: tuple[str, int, int, int, int] | None) -> str:
    """The change as unified-diff text: the whole file (`op` None) or one hunk, decoded with replacement."""
    a, b = _lines(base), _lines(cand)
    if op is not None:
        _, i1, i2, j1, j2 = op
        body = [b"-" + x for x in a[i1:i2]] + [b"+" + x for x in b[j1:j2]]
        head = _header(op) + "\n"
    else:
        body = [b"-" + x for x in a] + [b"+" + x for x in b]
        head = ""
    text = b"".join(x if x.endswith(b"\n") else x + b"\n" for x in body).decode("utf-8", "replace")
    return f"--- a/{name}\n+++ b/{name}\n{head}{text}"


def changes_of(snap: gitsnapshot.Snapshot) -> list[Change]:
    """The candidate's changes in diff order (module docstring); one per file above `MAX_CHANGES` hunks."""
    out: list[Change] = []
    names = sorted(
        {p for p in snap.files if snap.files[p] != snap.base_files.get(p)}
        | (set(snap.base_files) - set(snap.files))
    )
    for name in names:
        base, cand = snap.base_files.get(name), snap.files.get(name, b"")
        if name not in snap.files or name not in snap.base_files or base is None or cand is None:
            header = (
                "deleted file"
                if name not in snap.files
                else "new file"
                if name not in snap.base_files
                else "whole file"
            )
            out.append(Change(name, None, header, _text(name, base or b"", cand or b"", None)))
            continue
        for k, op in enumerate(_opcodes(base, cand)):
            out.append(Change(name, k, _header(op), _text(name, base, cand, op)))
    if sum(c.hunk is not None for c in out) > MAX_CHANGES:
        out = [
            Change(
                n, None, "whole file", _text(n, snap.base_files.get(n) or b"", snap.files.get(n) or b"", None)
            )
            for n in names
        ]
    return out


def without(snap: gitsnapshot.Snapshot, changes: list[Change], dropped: set[int]) -> gitsnapshot.Snapshot:
    """`snap` with the changes whose index (in `changes`) is in `dropped` taken back to the base."""
    files = dict(snap.files)
    for i in dropped:
        c = changes[i]
        if c.hunk is None:
            if c.file in snap.base_files:
                files[c.file] = snap.base_files[c.file]
            else:
                files.pop(c.file, None)
    for name in {changes[i].file for i in dropped if changes[i].hunk is not None}:
        gone = {changes[i].hunk for i in dropped if changes[i].file == name}
        a, b = _lines(snap.base_files[name]), _lines(snap.files[name])
        out: list[bytes] = []
        at = 0
        for k, (_, i1, i2, j1, j2) in enumerate(_opcodes(snap.base_files[name], snap.files[name] or b"")):
            out += a[at:i1]
            out += a[i1:i2] if k in gone else b[j1:j2]
            at = i2
        files[name] = b"".join(out + a[at:])
    return dataclasses.replace(snap, files=files)
