"""What one round's diagnosis produces (`Diagnosis`) and the roles' shared transcript (`Transcript`,
`rounds/<n>/transcript.jsonl`): the types the FDCR roles, the spec parser and the strategies share."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.records import ModificationSpec
from pytest_ecdysis.core.secrets import redact_json
from pytest_ecdysis.endpoint.role_client import Completion, add_tokens


@dataclass
class Diagnosis:
    """The outcome of one round's diagnosis.

    `spec` is None unless a spec validated and has at least one change; `reason` then says why:
    `no_failures`, `no_spec` (the roles proposed nothing), `invalid_spec` (did not validate after one
    repair), `outside_harness` (it named files outside the harness), `context_overflow` (a role prompt
    did not fit the model's context) or `slow_endpoint` (a role call timed out); `detail` is the human
    message.
    `specs` holds every spec for instance-level strategies (`self-evolution`), else `[spec]` or `[]`.
    `tokens` sums all role calls (`prompt`, `completion`, `total`); `wall_s` is seconds of the whole call.
    """

    spec: ModificationSpec | None
    reason: str = ""
    detail: str = ""
    transcript: list[dict[str, Any]] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "completion": 0, "total": 0})
    wall_s: float = 0.0
    calls: int = 0
    specs: list[ModificationSpec] = field(default_factory=list)
    instance_level: bool = False
    alternatives: bool = False  #: `specs` are alternatives validated from the same incumbent, best kept
    regression_aware: bool = False  #: a candidate may not break a task the incumbent solved
    n_records: int = 0
    evidence_chars: int = 0


class Transcript:
    """The shared transcript: kept in memory and appended to `round_dir/transcript.jsonl` turn by turn."""

    def __init__(self, round_dir: Path | None) -> None:
        self.lines: list[dict[str, Any]] = []
        self.tokens = {"prompt": 0, "completion": 0, "total": 0}
        self.path = None if round_dir is None else Path(round_dir) / "transcript.jsonl"
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("", encoding="utf-8")

    def add(self, role: str, pass_: int | None, reply: Completion, **extra: Any) -> None:
        line = {
            "role": role,
            "pass": pass_,
            "content": reply.text,
            "tokens": reply.tokens,
            "wall_s": round(reply.wall_s, 4),
            **extra,
        }
        self.lines.append(line)
        self.tokens = add_tokens(self.tokens, reply.tokens)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(redact_json(line), ensure_ascii=False) + "\n")
