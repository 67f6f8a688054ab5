"""A role's spec answer: parsed, validated against `ModificationSpec`, repaired once, written.

`spec_call(client, role, messages, tx, pass_, harness_dir)` asks for JSON mode, parses the answer as
JSON, else from a fenced block or the first object of the text (`evidence.build.extract_json`), then checks it
(`validate_spec`: the schema, and every file inside the harness); an answer that fails gets **one** repair
call with the error, then the spec is None with the reason (`invalid_spec`, `outside_harness`) and what
made it unusable (`unusable`: an empty reply, one cut at the token limit). `write_spec` writes
`spec.json` with `schema_version`. This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from pytest_ecdysis.core.errors import SpecError, shown
from pytest_ecdysis.core.records import SCHEMA_VERSION, ModificationSpec
from pytest_ecdysis.core.secrets import redact_json
from pytest_ecdysis.endpoint.role_client import Completion, RoleClient
from pytest_ecdysis.evidence.build import extract_json

if TYPE_CHECKING:
    from pytest_ecdysis.diagnose.transcript import Transcript


def validate_spec(value: Any, harness_dir: Path | None) -> ModificationSpec:
    """A parsed answer as a `ModificationSpec` whose files all lie inside `harness_dir`.

    A leading `<harness dir name>/` on a path is dropped (models often write it), and an absolute path
    inside the harness is made relative.

    Raises:
        SpecError: no JSON object, a schema mismatch (the pydantic errors, shortened), or a file path that
            leaves the harness directory.
    """
    if not isinstance(value, Mapping):
        raise SpecError("the answer holds no JSON object; answer with one JSON object of the spec's shape")
    try:
        spec = ModificationSpec.model_validate(value)
    except ValidationError as exc:
        problems = shown([f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()], 8, "; ")
        raise SpecError(f"the JSON does not match the modification spec schema: {problems}") from None
    if harness_dir is None:
        return spec
    root = Path(harness_dir).resolve()
    outside = []
    for i, change in enumerate(spec.changes):
        files = []
        for name in change.files:
            rel = name.strip()
            if rel.startswith(root.name + "/") and not (root / rel).exists():
                rel = rel[len(root.name) + 1 :]
            target = (root / rel).resolve()  # an absolute path stays absolute here
            if target == root or root in target.parents:
                rel = target.relative_to(root).as_posix() if Path(rel).is_absolute() else rel
            if (target != root and root not in target.parents) or not rel:
                outside.append(f"{name!r} (change {i + 1})")
            files.append(rel)
        change.files = files
    if outside:
        raise SpecError(
            f"the spec names files outside the harness directory {root}: {', '.join(outside)}; "
            "a spec may only name paths relative to the harness directory"
        )
    return spec


def write_spec(round_dir: Path | None, spec: ModificationSpec, name: str = "spec.json") -> None:
    if round_dir is None:
        return
    Path(round_dir).mkdir(parents=True, exist_ok=True)
    data = spec.model_dump(mode="json")
    data["schema_version"] = SCHEMA_VERSION
    (Path(round_dir) / name).write_text(
        json.dumps(redact_json(data), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def spec_call(
    client: RoleClient,
    role: str,
    messages: list[dict[str, Any]],
    tx: Transcript,
    pass_: int | None,
    harness_dir: Path | None,
) -> tuple[ModificationSpec | None, str, str]:
    """Ask `role` for a spec; parse, validate, and repair once. Returns `(spec, reason, detail)`."""
    reply = client.complete(role, messages, json_mode=True)
    tx.add(role, pass_, reply)
    try:
        return validate_spec(extract_json(reply.text), harness_dir), "", ""
    except SpecError as exc:
        error = unusable(reply, exc)
    repair = messages + [
        {"role": "assistant", "content": reply.text},
        {
            "role": "user",
            "content": f"Your answer could not be used: {error}. Answer again with only the "
            "corrected JSON object of the modification spec.",
        },
    ]
    reply = client.complete(role, repair, json_mode=True)
    tx.add(role, pass_, reply, repair=True)
    try:
        return validate_spec(extract_json(reply.text), harness_dir), "", ""
    except SpecError as exc:
        reason = "outside_harness" if "outside the harness" in str(exc) else "invalid_spec"
        return None, reason, f"{role} answer unusable after one repair: {unusable(reply, exc)}"


def unusable(reply: Completion, exc: SpecError) -> str:
    """Why a spec answer could not be used, naming an empty reply and one cut at the token limit."""
    if not reply.text.strip():
        return f"the reply was empty (finish_reason {reply.finish_reason!r})"
    if reply.finish_reason == "length":
        return f"{exc} (the reply was cut at the token limit: finish_reason 'length')"
    return str(exc)
