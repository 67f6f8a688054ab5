"""A candidate that asks for another model is said in the round's validation line, not only in
`trials.jsonl` (the request guard overrides the model and notes it: `request_guard`)."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_ecdysis.evolve.stages import _model_overrides
from pytest_ecdysis.validate.results import MODEL_OVERRIDDEN, model_overrides


def test_trials_whose_harness_asked_for_another_model_are_counted(tmp_path: Path) -> None:
    note = {"kind": MODEL_OVERRIDDEN, "detail": "asked for 'gpt-big'", "step": None}
    trials = [
        {"task_id": "1", "termination_reason": "user_stop", "harness_notes": [note]},
        {"task_id": "2", "termination_reason": "user_stop", "endpoint_notes": [note]},
        {"task_id": "3", "termination_reason": "user_stop", "harness_notes": [{"kind": "request_filtered"}]},
        {"task_id": "4", "termination_reason": "user_stop"},
    ]
    assert model_overrides(trials) == 2
    (tmp_path / "summary.json").write_text(json.dumps({"suite_score": 0.5}))
    (tmp_path / "trials.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trials))
    assert _model_overrides(tmp_path) == 2
    assert _model_overrides(tmp_path / "missing") == 0
