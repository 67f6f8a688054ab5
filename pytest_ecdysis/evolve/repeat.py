"""No repeated diagnosis: a round whose diagnosis would see exactly what an earlier round's saw, and that
earlier round found nothing to change, does not call the roles again; the loop stops (`no_new_evidence`).

The input of a diagnosis (`diagnosis_input`, a SHA-256 hex digest) is what the roles read that can change
between rounds: the incumbent (harness id and commit), its evidence (the bytes of `failures.jsonl` and
`groups.json` of the run the incumbent was scored in), the diagnosis options (strategy, diagnosis model,
passes, `--ecdysis-evidence`) and the specs earlier rounds tried with their outcomes (the history the roles
read, `evidence.context.history_view`; a round that found nothing adds only that answer, so it is left out,
also when it wrote a `spec.json` without changes). The roles are
called at temperature 0 (`endpoint.role_client`) and the simulated roles are deterministic, so the same input
gets the same answer: an earlier `no_spec` (or `no_failures`) on the same input is this round's answer,
and calling the roles again only spends tokens. After a rejected spec the input differs (the history now
holds the rejected spec, which the roles are told not to propose unchanged), so that round is diagnosed.
Only the controller runs this; no model call.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pytest_ecdysis.core.rundir import spec_of
from pytest_ecdysis.evolve.context import RoundContext

#: outcomes of a diagnosis that found nothing to change: the same input gets the same answer.
NOTHING_FOUND = ("no_spec", "no_failures", "no_new_evidence")
#: the evidence files of a run directory the diagnosis reads.
EVIDENCE_FILES = ("failures.jsonl", "groups.json")


def diagnosis_input(ev: RoundContext) -> str:
    """The digest of what this round's diagnosis would read (see the module docstring)."""
    inc = ev.doc["incumbent"]
    h = hashlib.sha256()
    cfg = ev.cfg
    head = {
        "harness_id": inc.get("harness_id"),
        "commit": inc.get("commit"),
        "strategy": cfg.strategy,
        "model": getattr(cfg, "diagnosis_model", None),
        "passes": getattr(cfg, "fdcr_passes", None),
        "evidence": getattr(cfg, "evidence", None),
    }
    h.update(json.dumps(head, sort_keys=True).encode())
    for name in EVIDENCE_FILES:
        path = Path(inc["run_path"]) / name
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"<none>") + b"\0")
    for r in ev.doc.get("rounds") or []:
        if (
            r.get("outcome") in NOTHING_FOUND
        ):  # its spec.json (if any) proposes nothing: the same answer again
            continue
        spec = spec_of(ev.dir / "rounds" / str(r["round"]))
        if spec is not None:
            h.update(json.dumps({"spec": spec, "outcome": r.get("outcome")}, sort_keys=True).encode())
    return h.hexdigest()


def earlier_answer(ev: RoundContext, digest: str) -> dict[str, Any] | None:
    """The latest earlier round of the same diagnosis input that found nothing to change, or None."""
    for r in reversed(ev.doc.get("rounds") or []):
        if r.get("diagnosis_input") == digest and r.get("outcome") in NOTHING_FOUND:
            return r
    return None


def diagnose_once(ev: RoundContext, n: int, compute: Any) -> dict[str, Any]:
    """`compute()` (the diagnosis stage) with its input digest recorded, unless an earlier round of the same
    input found nothing: then `{"outcome": "no_new_evidence", "reason", "spec": None, "same_as_round"}`
    without any role call."""
    digest = diagnosis_input(ev)
    earlier = earlier_answer(ev, digest)
    if earlier is not None:
        reason = (
            f"the incumbent, its evidence and the specs tried are unchanged since round {earlier['round']}, "
            f"whose diagnosis found nothing to change ({earlier['outcome']}); the roles answer the same "
            "input the same way (temperature 0), so they are not called again"
        )
        ev.say(f"round {n}: {reason}", n)
        return {
            "outcome": "no_new_evidence",
            "reason": reason,
            "spec": None,
            "diagnosis_input": digest,
            "same_as_round": earlier["round"],
            "tokens": {"prompt": 0, "completion": 0, "total": 0},
            "wall_s": 0.0,
        }
    return {**compute(), "diagnosis_input": digest}
