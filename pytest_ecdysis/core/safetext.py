"""Text from outside (an endpoint's error message, a tool result, an editor's stderr) made safe for where it goes.

An endpoint's 500 reply can carry an ANSI colour escape or a NUL byte (GPU servers print them). Written
as is, such text makes `junit.xml` not well-formed XML (junitparser's pretty-printer raises on it, so the
run was lost), garbles a Markdown job summary and lets a remote server move the cursor or recolour the
user's terminal. Each function here replaces the characters its format cannot carry by
a visible escape (`\\x1b`, `\\x00`, `\\u200e`...), so nothing is lost and nothing is interpreted:

- `xml(text)`: what XML 1.0 forbids (C0 controls but tab, newline and carriage return; lone surrogates;
  U+FFFE, U+FFFF), plus the other C0/C1 controls and DEL so a report does not carry escape sequences;
- `terminal(text)`: every C0/C1 control and DEL but tab and newline, and the bidirectional overrides
  (U+202A-U+202E, U+2066-U+2069) that can reorder what a reader sees;
- `markdown(text)`: the same as `terminal` (GitHub renders NUL as U+FFFD and shows escapes as garbage).

Pure functions of `str`; `None` gives `""`. This module must not import anything beyond the standard library.
"""

from __future__ import annotations

import re

_TERMINAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def xml(text: object) -> str:
    """`text` with every character XML 1.0 cannot carry (and every other control) as a visible escape."""
    return "" if text is None else _XML.sub(_escape, str(text))


def terminal(text: object) -> str:
    """`text` with control characters (tab and newline kept) and bidi overrides as visible escapes."""
    return "" if text is None else _TERMINAL.sub(_escape, str(text))


def markdown(text: object) -> str:
    """`text` safe for a Markdown document (GitHub job summary, PR body): as `terminal`."""
    return terminal(text)
