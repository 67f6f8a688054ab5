"""Known secret values, redacted from everything the tool writes.

A harness, an editor or an endpoint's error text can carry an API key into a note, a record, a log or a
report; those files are the evidence sent to the diagnosis model, the PR body, the CI artifacts. Every
write path calls `redact` (text), `redact_json` (a JSON-ready object) or `redact_file` (a log written
by a sub-process) before or right after it writes, so a known secret value never stays on disk.

The known values (`secret_values()`), read from the environment at each call (a key set later is seen):

- every variable whose name ends in `_KEY`, `_TOKEN`, `_SECRET`, `_PASSWORD` or `_API_KEY`
  (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `GITHUB_TOKEN`, the simulated model's `ECDYSIS_SIM_TOKEN`...),
  whose value has at least `MIN_SECRET_CHARS` (8) characters (shorter values such as `sim`, `EMPTY` or `1`
  would redact ordinary words);
- values registered by the trusted side with `register(value)` (a key from an option, a run's token).

Each value is replaced by `[redacted:<NAME>]` wherever it appears as is, JSON-escaped, or URL-quoted.
What it cannot see: a secret written in another encoding (base64, reversed, split across fields); the
sandbox and the hidden environment are the wall there (docs/evolution.md, threat model). Standard library
only; no other module of the package is imported.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

#: Name endings of environment variables whose values are secrets.
SECRET_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_APIKEY")
#: Shorter values are not redacted (too likely to be ordinary text: `sim`, `EMPTY`, `none`).
MIN_SECRET_CHARS = 8

_REGISTERED: dict[str, str] = {}  # value -> label
_LOCK = threading.Lock()


def register(value: str | None, label: str = "SECRET") -> None:
    """Add `value` to the known secrets (ignored when shorter than `MIN_SECRET_CHARS`)."""
    if value and len(value) >= MIN_SECRET_CHARS:
        with _LOCK:
            _REGISTERED[value] = label


def is_secret_name(name: str) -> bool:
    """True for an environment variable name that holds a secret (`OPENAI_API_KEY`, `GH_TOKEN`)."""
    return name.upper().endswith(SECRET_SUFFIXES)


def secret_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`{value: label}` of the known secrets: registered ones and those of `env` (default `os.environ`).
    Longest first, so a key that contains another is replaced whole."""
    environ = os.environ if env is None else env
    found = {v: n for n, v in environ.items() if is_secret_name(n) and v and len(v) >= MIN_SECRET_CHARS}
    with _LOCK:
        found.update(_REGISTERED)
    return dict(sorted(found.items(), key=lambda kv: -len(kv[0])))


def _forms(value: str) -> set[str]:
    return {
        value,
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        quote(value, safe=""),
    }


def redact(text: str, env: dict[str, str] | None = None) -> str:
    """`text` with every known secret value (as is, JSON-escaped or URL-quoted) replaced by
    `[redacted:<NAME>]`. Pure of side effects; `None`-safe callers pass `""`."""
    return _redact(text, secret_values(env)) if text else text


def _redact(text: str, secrets: dict[str, str]) -> str:
    for value, label in secrets.items():
        for form in _forms(value):
            if form and form in text:
                text = text.replace(form, f"[redacted:{label}]")
    return text


def redact_json(obj: Any, env: dict[str, str] | None = None) -> Any:
    """A copy of a JSON-ready object (dicts, lists, strings, numbers) with every string redacted (keys too)."""
    secrets = secret_values(env)
    if not secrets:
        return obj

    def walk(x: Any) -> Any:
        if isinstance(x, str):
            return _redact(x, secrets)
        if isinstance(x, dict):
            return {walk(k) if isinstance(k, str) else k: walk(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [walk(v) for v in x]
        return x

    return walk(obj)


def redact_bytes(data: bytes, env: dict[str, str] | None = None) -> bytes:
    """`data` (UTF-8 text or not) with every known secret value's bytes replaced."""
    for value, label in secret_values(env).items():
        for form in _forms(value):
            raw = form.encode("utf-8", "surrogatepass")
            if raw and raw in data:
                data = data.replace(raw, f"[redacted:{label}]".encode())
    return data


def redact_file(path: str | Path, env: dict[str, str] | None = None) -> bool:
    """Rewrite `path` in place (atomically) when it holds a known secret; True when it did. A file that
    cannot be read or written is left as it is (False)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError:
        return False
    clean = redact_bytes(data, env)
    if clean == data:
        return False
    try:
        tmp = path.with_name(path.name + ".redact.tmp")
        tmp.write_bytes(clean)
        tmp.replace(path)
    except OSError:
        return False
    return True


def redact_tree(root: str | Path, env: dict[str, str] | None = None) -> list[Path]:
    """`redact_file` on every regular file under `root` (symlinks not followed); the files it rewrote."""
    done = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if not path.is_symlink() and redact_file(path, env):
                done.append(path)
    return done


def secrets_in(files: dict[str, bytes | None], env: dict[str, str] | None = None) -> list[str]:
    """`"<file>: the value of <NAME>"` for each file of `files` (path -> bytes, None for a symlink) that holds a
    known secret (`secret_values`) as it is, reversed, or base64- or hex-encoded: a candidate that carries a
    secret into its source is refused, since its bytes become a commit and a pull request."""
    import base64

    found: list[str] = []
    values = secret_values(env)
    for path, data in sorted(files.items()):
        if not data:
            continue
        for value, label in values.items():
            raw = value.encode()
            forms = {
                raw,
                raw[::-1],
                base64.b64encode(raw),
                base64.b64encode(raw).rstrip(b"="),
                raw.hex().encode(),
                *(f.encode() for f in _forms(value)),
            }
            if any(form in data for form in forms):
                found.append(f"{path}: the value of {label}")
    return found
