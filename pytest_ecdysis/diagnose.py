"""Diagnosis: a round's failure evidence -> a modification spec, through the chosen strategy.

    d = diagnose(records=..., groups=..., harness_dir=..., history=..., solved_tasks=..., cfg=cfg,
                 round_dir=run_path / "rounds" / "1")
    d.spec        # ModificationSpec with at least one change, or None (d.reason says why)

FDCR (`ecdysis`, docs/diagnosis.md): Analyst, Critic and Engineer share one transcript for K passes
(`cfg.fdcr_passes`), then the Moderator writes the spec: 3K+1 calls. `ecdysis-nofdcr`: one analyst
call writes the spec: 1 call. Other strategies live in `pytest_ecdysis.strategies`.

Structured output (`spec_answer`): the spec-writing call asks for JSON mode; the answer is parsed as JSON, else from a
fenced block or the first object in the text (`evidence.extract_json`); an answer that does not validate
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

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ContextOverflowError, InfrastructureError
from .evidence import Evidence, build_evidence, render_turn, usable_records
from .llm import Completion, RoleClient, add_tokens
from .records import FailureRecord, ModificationSpec, PatternGroup
from .spec_answer import spec_call, unusable, validate_spec, write_spec

#: Names other modules import from here (kept where they were before `spec_answer`).
__all__ = ["FORMATS", "ROLES", "Diagnosis", "Transcript", "diagnose", "evidence_for", "finish", "load_prompt",
           "role_messages", "run_fdcr", "run_single_analyst", "spec_call", "stopped", "timed_out", "unusable",
           "validate_spec", "write_spec"]

ROLES = ("analyst", "critic", "engineer")
#: What each role is asked to answer with (the `format` of the `<respond .../>` marker).
FORMATS = {"analyst": "proposal", "critic": "verdicts", "engineer": "ledger", "moderator": "spec"}


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


def load_prompt(name: str) -> str:
    """The text of `prompts/<name>.md` (the shared principles are prepended to every role prompt)."""
    base = resources.files("pytest_ecdysis.prompts")
    return (base / "_common.md").read_text(encoding="utf-8") + "\n" + (base / f"{name}.md").read_text(
        encoding="utf-8")


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
        line = {"role": role, "pass": pass_, "content": reply.text, "tokens": reply.tokens,
                "wall_s": round(reply.wall_s, 4), **extra}
        self.lines.append(line)
        self.tokens = add_tokens(self.tokens, reply.tokens)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(line, ensure_ascii=False) + "\n")


def role_messages(role: str, prompt: str, pass_: int | None, passes: int, evidence_text: str,
                  turns: Sequence[dict[str, Any]], fmt: str) -> list[dict[str, Any]]:
    """The chat messages of one role turn: the role prompt, then evidence + shared transcript + marker."""
    parts = [evidence_text]
    if turns:
        parts.append("The discussion so far (shared transcript):\n<transcript>\n"
                     + "\n".join(render_turn(t["role"], t["pass"], t["content"]) for t in turns)
                     + "\n</transcript>")
    where = "final" if pass_ is None else f"pass {pass_} of {passes}"
    parts.append(f"You are the {role.capitalize()} ({where}). Answer as your instructions say.\n"
                 f'<respond role="{role}" pass="{"final" if pass_ is None else pass_}" passes="{passes}" '
                 f'format="{fmt}"/>')
    return [{"role": "system", "content": prompt}, {"role": "user", "content": "\n\n".join(parts)}]


def run_fdcr(evidence: Evidence, client: RoleClient, passes: int, tx: Transcript,
             harness_dir: Path | None) -> tuple[ModificationSpec | None, str, str]:
    """K passes of Analyst, Critic, Engineer over one shared transcript, then the Moderator (3K+1 calls)."""
    text = evidence.render()
    prompts = {role: load_prompt(role) for role in (*ROLES, "moderator")}
    turns: list[dict[str, Any]] = []
    for pass_ in range(1, passes + 1):
        for role in ROLES:
            reply = client.complete(role, role_messages(role, prompts[role], pass_, passes, text, turns,
                                                        FORMATS[role]))
            tx.add(role, pass_, reply)
            turns.append({"role": role, "pass": pass_, "content": reply.text or "(no answer)"})
    messages = role_messages("moderator", prompts["moderator"], None, passes, text, turns, "spec")
    return spec_call(client, "moderator", messages, tx, None, harness_dir)


def run_single_analyst(evidence: Evidence, client: RoleClient, tx: Transcript,
                       harness_dir: Path | None) -> tuple[ModificationSpec | None, str, str]:
    """One analyst call that writes the spec directly (no review): 1 call (2 with a repair)."""
    messages = role_messages("analyst", load_prompt("analyst_nofdcr"), 1, 1, evidence.render(), [], "spec")
    return spec_call(client, "analyst", messages, tx, 1, harness_dir)


def finish(spec: ModificationSpec | None, reason: str, detail: str, tx: Transcript, round_dir: Path | None,
           start: float, evidence: Evidence) -> Diagnosis:
    """A `Diagnosis` from one spec (written to `spec.json` when it validated, even with no change)."""
    if spec is not None:
        write_spec(round_dir, spec)
        if not spec.changes:
            reason = "no_spec"
            detail = f"the spec proposes no change, {len(spec.left_alone)} group(s) left alone"
            spec = None
    return Diagnosis(spec=spec, reason=reason, detail=detail, transcript=tx.lines, tokens=tx.tokens,
                     wall_s=time.monotonic() - start, calls=len(tx.lines), specs=[spec] if spec else [],
                     n_records=evidence.n_records, evidence_chars=len(evidence.render()))


def diagnose(
    *,
    records: Sequence[FailureRecord],
    groups: Sequence[PatternGroup],
    harness_dir: Path | None,
    history: Iterable[Any] = (),
    solved_tasks: Iterable[str] | Mapping[str, Any] = (),
    cfg: Any,
    round_dir: Path | None,
    strategy: str = "ecdysis",
    client: RoleClient | None = None,
) -> Diagnosis:
    """Turn one round's failure records and groups into a modification spec with the named strategy.

    Args:
        records, groups: the round's `FailureRecord`s and `PatternGroup`s (suspect and infrastructure
            records are dropped; `cfg.evidence_limit` applies the failure-aware selection).
        harness_dir: the incumbent harness (mapped for the roles; spec files must lie inside it).
        history: earlier rounds (`evidence.PastRound` or dicts with `round`, `outcome`, `score_before`,
            `score_after`, `spec`), so a rejected idea is not proposed unchanged.
        solved_tasks: task ids the incumbent solves in every trial (or `{task_id: tools used}`).
        cfg: an `EcdysisConfig` (uses `diagnosis_model`, `base_url`, `fdcr_passes`, `evidence_limit`).
        round_dir: where `transcript.jsonl` and `spec.json` go (None: nothing written).
        strategy: a name of `pytest_ecdysis.strategies` (`ecdysis`, `ecdysis-nofdcr`, ...).
        client: a ready `RoleClient` (tests); default `RoleClient.from_config(cfg)`, built only when needed.

    Raises:
        InfrastructureError: the diagnosis endpoint failed after retries (the transcript so far is kept).
        UsageError: an unknown strategy, or a diagnosis model without an endpoint.
    """
    from .strategies.base import RoundInput, get_strategy

    start = time.monotonic()
    impl = get_strategy(strategy)
    if not usable_records(records):
        return Diagnosis(spec=None, reason="no_failures",
                         detail="no failure records to diagnose (suspect tasks and infrastructure errors "
                                "are never evidence): the round stops without a diagnosis call",
                         wall_s=time.monotonic() - start)
    round_input = RoundInput(records=list(records), groups=list(groups),
                             harness_dir=None if harness_dir is None else Path(harness_dir),
                             history=list(history), solved_tasks=solved_tasks, cfg=cfg,
                             round_dir=None if round_dir is None else Path(round_dir))
    client = client or RoleClient.from_config(cfg)
    try:
        diagnosis = impl.propose(round_input, client)
    except ContextOverflowError as exc:
        return stopped(exc, round_input.round_dir, start)
    except InfrastructureError as exc:
        if not timed_out(exc):
            raise
        return stopped(exc, round_input.round_dir, start)
    diagnosis.wall_s = time.monotonic() - start
    return diagnosis


def timed_out(exc: BaseException) -> bool:
    """True for an endpoint error that is a call (or stage budget) timing out: a slow model, not a dead one."""
    import openai

    return isinstance(exc.__cause__, openai.APITimeoutError) or "timed out" in str(exc)


def stopped(exc: Exception, round_dir: Path | None, start: float) -> Diagnosis:
    """The no-spec `Diagnosis` of a role call that overflowed the context or timed out; the turns that were
    answered are read back from `transcript.jsonl` (written as they happened)."""
    lines: list[dict[str, Any]] = []
    path = None if round_dir is None else Path(round_dir) / "transcript.jsonl"
    if path is not None and path.is_file():
        lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    tokens = {"prompt": 0, "completion": 0, "total": 0}
    for line in lines:
        tokens = add_tokens(tokens, line.get("tokens") or {})
    reason = "context_overflow" if isinstance(exc, ContextOverflowError) else "slow_endpoint"
    return Diagnosis(spec=None, reason=reason, detail=f"diagnosis stopped after {len(lines)} answered call(s): {exc}",
                     transcript=lines, tokens=tokens, wall_s=time.monotonic() - start, calls=len(lines))


def evidence_for(round_input: Any, **kwargs: Any) -> Evidence:
    """The bounded evidence of a `RoundInput` (`cfg.evidence_limit` applied)."""
    return build_evidence(records=round_input.records, groups=round_input.groups,
                          harness_dir=round_input.harness_dir, history=round_input.history,
                          solved_tasks=round_input.solved_tasks,
                          limit=getattr(round_input.cfg, "evidence_limit", None), **kwargs)
