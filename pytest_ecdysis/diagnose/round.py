"""One round's diagnosis: the failure records and groups in, the named strategy's `Diagnosis` out.

`diagnose(...)` picks the strategy (`pytest_ecdysis/diagnose/strategies/`), stops before any model call when
no record is usable, and turns a role call that overflowed the context or timed out into a no-spec
`Diagnosis` (`stopped`). The FDCR roles themselves are in `fdcr.py`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.config import EcdysisConfig
from pytest_ecdysis.core.errors import ContextOverflowError, InfrastructureError
from pytest_ecdysis.core.records import FailureRecord, PatternGroup
from pytest_ecdysis.diagnose.strategies.base import RoundInput, get_strategy
from pytest_ecdysis.diagnose.transcript import Diagnosis
from pytest_ecdysis.endpoint.role_client import RoleClient, add_tokens
from pytest_ecdysis.evidence.views import usable_records

__all__ = ["diagnose", "stopped", "timed_out"]


def diagnose(
    *,
    records: Sequence[FailureRecord],
    groups: Sequence[PatternGroup],
    harness_dir: Path | None,
    history: Iterable[Any] = (),
    solved_tasks: Iterable[str] | Mapping[str, Any] = (),
    weak_passes: Iterable[Mapping[str, Any]] = (),
    cfg: EcdysisConfig,
    round_dir: Path | None,
    strategy: str = "ecdysis",
    client: RoleClient | None = None,
) -> Diagnosis:
    """Turn one round's failure records and groups into a modification spec with the named strategy.

    Args:
        records, groups: the round's `FailureRecord`s and `PatternGroup`s (suspect and infrastructure
            records are dropped; `cfg.evidence_limit` applies the failure-aware selection).
        harness_dir: the incumbent harness (mapped for the roles; spec files must lie inside it).
        history: earlier rounds (`evidence.context.PastRound` or dicts with `round`, `outcome`,
            `score_before`, `score_after`, `spec`), so a rejected idea is not proposed unchanged.
        solved_tasks: task ids the incumbent solves in every trial (or `{task_id: tools used}`).
        weak_passes: the incumbent run's weak passes (`summary.json` `weak_passes`), shown to the roles as
            evidence of a harness weakness, not of a failure.
        cfg: an `EcdysisConfig` (uses `diagnosis_model`, `base_url`, `fdcr_passes`, `evidence_limit`).
        round_dir: where `transcript.jsonl` and `spec.json` go (None: nothing written).
        strategy: a name of `pytest_ecdysis.diagnose.strategies` (`ecdysis`, `ecdysis-nofdcr`, ...).
        client: a ready `RoleClient` (tests); default `RoleClient.from_config(cfg)`, built only when needed.

    Raises:
        InfrastructureError: the diagnosis endpoint failed after retries (the transcript so far is kept).
        UsageError: an unknown strategy, or a diagnosis model without an endpoint.
    """
    start = time.monotonic()
    impl = get_strategy(strategy)
    if not usable_records(records):
        return Diagnosis(
            spec=None,
            reason="no_failures",
            detail="no failure records to diagnose (suspect tasks and infrastructure errors "
            "are never evidence): the round stops without a diagnosis call",
            wall_s=time.monotonic() - start,
        )
    round_input = RoundInput(
        records=list(records),
        groups=list(groups),
        harness_dir=None if harness_dir is None else Path(harness_dir),
        history=list(history),
        solved_tasks=solved_tasks,
        weak_passes=[dict(w) for w in weak_passes],
        cfg=cfg,
        round_dir=None if round_dir is None else Path(round_dir),
    )
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
    return Diagnosis(
        spec=None,
        reason=reason,
        detail=f"diagnosis stopped after {len(lines)} answered call(s): {exc}",
        transcript=lines,
        tokens=tokens,
        wall_s=time.monotonic() - start,
        calls=len(lines),
    )
