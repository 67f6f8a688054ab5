"""Diagnosis: a round's failure evidence -> a modification spec, through the chosen strategy.

    d = diagnose(records=..., groups=..., harness_dir=..., history=..., solved_tasks=..., cfg=cfg,
                 round_dir=run_path / "rounds" / "1")
    d.spec        # ModificationSpec with at least one change, or None (d.reason says why)

FDCR (`ecdysis`, docs/diagnosis.md): Analyst, Critic and Engineer share one transcript for K passes
(`cfg.fdcr_passes`), then the Moderator writes the spec: 3K+1 calls. `ecdysis-nofdcr`: one analyst
call writes the spec: 1 call. Other strategies live in `pytest_ecdysis.diagnose.strategies`.

Structured output (`diagnose.spec`): the spec-writing call asks for JSON mode; the answer is parsed as JSON, else from a
fenced block or the first object in the text (`evidence.build.extract_json`); an answer that does not validate
against `ModificationSpec`, or that names files outside the harness, gets **one** repair call with the
error; if that fails too, the spec is None with the reason. Written to `round_dir`: `transcript.jsonl`
(one line per role turn, appended as they happen, so it is kept whatever goes wrong) and `spec.json`
(with `schema_version`) when a spec validated. A role prompt longer than the model's context
(`ContextOverflowError`) or a role call that timed out (`timed_out`) ends the diagnosis with no spec
(`reason` `context_overflow` / `slow_endpoint`, the transcript so far kept); other endpoint failures
propagate as `InfrastructureError`. No usable failure records -> no call at all, `reason == "no_failures"`.
This module must not import tau2, task suites or harness code.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.records import ModificationSpec
from pytest_ecdysis.diagnose.spec import spec_call, write_spec
from pytest_ecdysis.diagnose.transcript import Diagnosis, Transcript
from pytest_ecdysis.endpoint.role_client import RoleClient
from pytest_ecdysis.evidence.build import Evidence, build_evidence, render_turn

ROLES = ("analyst", "critic", "engineer")
#: What each role is asked to answer with (the `format` of the `<respond .../>` marker).
FORMATS = {"analyst": "proposal", "critic": "verdicts", "engineer": "ledger", "moderator": "spec"}


def load_prompt(name: str) -> str:
    """The text of `prompts/<name>.md` (the shared principles are prepended to every role prompt)."""
    base = resources.files("pytest_ecdysis.diagnose.prompts")
    return (
        (base / "_common.md").read_text(encoding="utf-8")
        + "\n"
        + (base / f"{name}.md").read_text(encoding="utf-8")
    )


def role_messages(
    role: str,
    prompt: str,
    pass_: int | None,
    passes: int,
    evidence_text: str,
    turns: Sequence[dict[str, Any]],
    fmt: str,
) -> list[dict[str, Any]]:
    """The chat messages of one role turn: the role prompt, then evidence + shared transcript + marker."""
    parts = [evidence_text]
    if turns:
        parts.append(
            "The discussion so far (shared transcript):\n<transcript>\n"
            + "\n".join(render_turn(t["role"], t["pass"], t["content"]) for t in turns)
            + "\n</transcript>"
        )
    where = "final" if pass_ is None else f"pass {pass_} of {passes}"
    parts.append(
        f"You are the {role.capitalize()} ({where}). Answer as your instructions say.\n"
        f'<respond role="{role}" pass="{"final" if pass_ is None else pass_}" passes="{passes}" '
        f'format="{fmt}"/>'
    )
    return [{"role": "system", "content": prompt}, {"role": "user", "content": "\n\n".join(parts)}]


def run_fdcr(
    evidence: Evidence, client: RoleClient, passes: int, tx: Transcript, harness_dir: Path | None
) -> tuple[ModificationSpec | None, str, str]:
    """K passes of Analyst, Critic, Engineer over one shared transcript, then the Moderator (3K+1 calls)."""
    text = evidence.render()
    prompts = {role: load_prompt(role) for role in (*ROLES, "moderator")}
    turns: list[dict[str, Any]] = []
    for pass_ in range(1, passes + 1):
        for role in ROLES:
            reply = client.complete(
                role, role_messages(role, prompts[role], pass_, passes, text, turns, FORMATS[role])
            )
            tx.add(role, pass_, reply)
            turns.append({"role": role, "pass": pass_, "content": reply.text or "(no answer)"})
    messages = role_messages("moderator", prompts["moderator"], None, passes, text, turns, "spec")
    return spec_call(client, "moderator", messages, tx, None, harness_dir)


def run_single_analyst(
    evidence: Evidence, client: RoleClient, tx: Transcript, harness_dir: Path | None
) -> tuple[ModificationSpec | None, str, str]:
    """One analyst call that writes the spec directly (no review): 1 call (2 with a repair)."""
    messages = role_messages("analyst", load_prompt("analyst_nofdcr"), 1, 1, evidence.render(), [], "spec")
    return spec_call(client, "analyst", messages, tx, 1, harness_dir)


def finish(
    spec: ModificationSpec | None,
    reason: str,
    detail: str,
    tx: Transcript,
    round_dir: Path | None,
    start: float,
    evidence: Evidence,
) -> Diagnosis:
    """A `Diagnosis` from one spec (written to `spec.json` when it validated, even with no change)."""
    if spec is not None:
        write_spec(round_dir, spec)
        if not spec.changes:
            reason = "no_spec"
            detail = f"the spec proposes no change, {len(spec.left_alone)} group(s) left alone"
            spec = None
    return Diagnosis(
        spec=spec,
        reason=reason,
        detail=detail,
        transcript=tx.lines,
        tokens=tx.tokens,
        wall_s=time.monotonic() - start,
        calls=len(tx.lines),
        specs=[spec] if spec else [],
        n_records=evidence.n_records,
        evidence_chars=len(evidence.render()),
    )


def evidence_for(round_input: Any, **kwargs: Any) -> Evidence:
    """The bounded evidence of a `RoundInput` (`cfg.evidence_limit` applied)."""
    return build_evidence(
        records=round_input.records,
        groups=round_input.groups,
        harness_dir=round_input.harness_dir,
        history=round_input.history,
        solved_tasks=round_input.solved_tasks,
        weak_passes=round_input.weak_passes,
        limit=getattr(round_input.cfg, "evidence_limit", None),
        **kwargs,
    )
