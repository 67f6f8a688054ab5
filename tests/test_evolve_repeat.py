"""No repeated diagnosis (`evolve/repeat.py`): the same input as a round that found nothing is not diagnosed."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from pytest_ecdysis.evolve import repeat


def make_ev(tmp_path: Path) -> SimpleNamespace:
    run = tmp_path / "run"
    (run / "rounds").mkdir(parents=True)
    (run / "failures.jsonl").write_text('{"task_id": "1"}\n')
    (run / "groups.json").write_text("[]")
    cfg = SimpleNamespace(strategy="ecdysis", diagnosis_model="sim", fdcr_passes=2, evidence="all")
    said: list[str] = []
    doc = {"incumbent": {"harness_id": "h@1", "commit": "c1", "run_path": str(run)}, "rounds": []}
    return SimpleNamespace(doc=doc, dir=run, cfg=cfg, say=lambda text, n=None: said.append(text), said=said)


def finish(ev: SimpleNamespace, doc: dict, spec: dict | None = None) -> None:
    n = len(ev.doc["rounds"]) + 1
    (ev.dir / "rounds" / str(n)).mkdir()
    if spec is not None:
        (ev.dir / "rounds" / str(n) / "spec.json").write_text(json.dumps(spec))
    ev.doc["rounds"].append(
        {"round": n, "outcome": doc["outcome"], "diagnosis_input": doc["diagnosis_input"]}
    )


def test_no_spec_on_the_same_input_is_not_asked_again(tmp_path: Path) -> None:
    """Round 1 found no spec; round 2 on the same incumbent and evidence calls no role and stops with
    `no_new_evidence`, naming round 1."""
    ev = make_ev(tmp_path)
    calls = []
    first = repeat.diagnose_once(
        ev, 1, lambda: calls.append(1) or {"outcome": "no_spec", "reason": "", "spec": None}
    )
    finish(ev, first, spec={"summary": "no change", "changes": [], "left_alone": [{"signature": "x"}]})
    second = repeat.diagnose_once(ev, 2, lambda: calls.append(2) or {"outcome": "no_spec", "spec": None})
    assert calls == [1]
    assert second["outcome"] == "no_new_evidence" and second["same_as_round"] == 1
    assert second["tokens"]["total"] == 0 and "round 1" in ev.said[-1]


def test_changed_evidence_incumbent_or_a_rejected_spec_is_diagnosed(tmp_path: Path) -> None:
    """A new incumbent, other evidence bytes, or a spec tried and rejected since (the roles read it in the
    history) make a new input: the roles are called."""
    ev = make_ev(tmp_path)
    finish(ev, repeat.diagnose_once(ev, 1, lambda: {"outcome": "no_spec", "spec": None}))
    ev.doc["incumbent"] = {**ev.doc["incumbent"], "harness_id": "h@2", "commit": "c2"}
    assert repeat.earlier_answer(ev, repeat.diagnosis_input(ev)) is None
    ev.doc["incumbent"] = {**ev.doc["incumbent"], "harness_id": "h@1", "commit": "c1"}
    assert repeat.earlier_answer(ev, repeat.diagnosis_input(ev)) is not None
    (ev.dir / "failures.jsonl").write_text('{"task_id": "2"}\n')
    assert repeat.earlier_answer(ev, repeat.diagnosis_input(ev)) is None
    (ev.dir / "failures.jsonl").write_text('{"task_id": "1"}\n')
    finish(
        ev,
        {"outcome": "rejected", "diagnosis_input": repeat.diagnosis_input(ev)},
        spec={"summary": "cut tool results at 4000", "changes": []},
    )
    again = repeat.diagnose_once(ev, 3, lambda: {"outcome": "no_spec", "spec": None})
    assert again["outcome"] == "no_spec"
