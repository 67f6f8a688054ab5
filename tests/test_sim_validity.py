"""Measured validity of accepted edits (sim/truth/validity.py) on scripted ground truths: which causes an
edit cured on which tasks, systematic fix vs accommodation vs noise, the ratio t, false acceptances."""

from __future__ import annotations

import json

from pytest_ecdysis.sim.client import write_ground_truth
from pytest_ecdysis.sim.truth.validity import (
    classify,
    edit_cures,
    evolution_validity,
    has_curable_quirks,
    ratio,
    summarise,
    summary_line,
)

S = "tau2-airline"


def line(task, failed, quirks=(), cause=None, closed=True, trial=0):
    return {
        "suite": S,
        "task_id": task,
        "trial": trial,
        "failed": failed,
        "closed": closed,
        "quirks": list(quirks),
        "cause": cause,
        "causes": [cause] if cause else [],
        "profile": "default",
    }


def q(kind, origin, cured=False, effect=None):
    return {
        "kind": kind,
        "origin": origin,
        "step": 1,
        "cured": cured,
        **({"effect": effect} if effect else {}),
    }


def unseen(task):
    return line(
        task,
        True,
        [q("unseen_value", "harness", effect="wrong_write")],
        {"kind": "unseen_value", "origin": "harness", "entry": 0},
    )


def test_a_harness_defect_cured_on_two_tasks_is_a_systematic_fix():
    """A value cut on tasks 1 and 2 before; after the edit neither trial misses it and both pass."""
    cures = edit_cures([unseen("1"), unseen("2")], [line("1", False), line("2", False)], [f"{S}/1", f"{S}/2"])
    assert [c["status"] for c in cures] == ["cured", "cured"]
    assert classify(cures) == "systematic_fix"


def test_a_cure_on_one_task_or_of_a_model_quirk_is_an_accommodation():
    """early_end cured on one task only, or a blind spot cured by a rule naming its value: accommodation;
    the same one-task cure of a kind also cured on the held-out split: systematic."""
    before = [
        line(
            "1",
            True,
            [q("early_end", "systematic", effect="ended_early")],
            {"kind": "early_end", "origin": "systematic", "entry": 0},
        )
    ]
    after = [line("1", False, [q("early_end", "systematic", cured=True)])]
    one = edit_cures(before, after, [f"{S}/1"])
    assert classify(one) == "accommodation"
    assert classify(one, held_out_kinds={"early_end"}) == "systematic_fix"
    blind_before = [
        line(
            t,
            True,
            [q("blind_spot", "model", effect="wrong_write")],
            {"kind": "blind_spot", "origin": "model", "entry": 0},
        )
        for t in ("1", "2")
    ]
    blind_after = [line(t, False, [q("blind_spot", "model", cured=True)]) for t in ("1", "2")]
    assert classify(edit_cures(blind_before, blind_after, [f"{S}/1", f"{S}/2"])) == "accommodation"


def test_a_flip_with_no_cure_behind_it_is_noise():
    """A slip that simply did not fire again (or a quirk that fired and did no harm): the gain is the draws'."""
    before = [
        line(
            "1",
            True,
            [q("slip", "model", effect="wrong_write")],
            {"kind": "slip", "origin": "model", "entry": 0},
        ),
        line(
            "2",
            True,
            [q("early_end", "systematic", effect="ended_early")],
            {"kind": "early_end", "origin": "systematic", "entry": 0},
        ),
    ]
    after = [line("1", False), line("2", False, [q("early_end", "systematic")])]
    cures = edit_cures(before, after, [f"{S}/1", f"{S}/2"])
    assert [c["status"] for c in cures] == ["not_drawn", "not_drawn"]
    assert classify(cures) == "noise"
    assert classify(cures, held_out_kinds={"slip"}) == "noise"  # a model quirk is never a systematic fix


def test_a_curable_cause_not_redrawn_is_confirmed_by_the_held_out_split():
    """Under a fresh nonce per sub-run the validation run may simply not draw the cause again (task 21's
    early_end after a completion check, measured): with that kind cured by the frozen harness on the
    held-out split the edit is a systematic fix; a held-out cure of another kind does not make it one."""
    before = [
        line(
            "21",
            True,
            [q("early_end", "systematic", effect="ended_early")],
            {"kind": "early_end", "origin": "systematic", "entry": 0},
        )
    ]
    cures = edit_cures(before, [line("21", False)], [f"{S}/21"])
    assert [c["status"] for c in cures] == ["not_drawn"]
    assert classify(cures) == "noise"
    assert classify(cures, held_out_kinds={"early_end"}) == "systematic_fix"
    assert classify(cures, held_out_kinds={"repeat_after_error"}) == "noise"
    still = edit_cures(
        before, [line("21", False, [q("early_end", "systematic", effect="ended_early")])], [f"{S}/21"]
    )
    assert classify(still, held_out_kinds={"early_end"}) == "noise"


def test_a_harness_limit_is_cured_when_every_trial_closes():
    before = [
        line(t, True, [], {"kind": "harness_limit", "origin": "harness", "entry": None}, closed=False)
        for t in ("1", "2")
    ]
    cures = edit_cures(before, [line("1", False), line("2", False)], [f"{S}/1", f"{S}/2"])
    assert classify(cures) == "systematic_fix"
    assert edit_cures(before, [line("1", False, closed=False)], [f"{S}/1"])[0]["status"] == "still_present"


def test_ratio_t_and_false_acceptances():
    """t = edits that are not systematic fixes / accepted edits; on a profile without curable quirks those
    are false acceptances, on one with them none are."""
    classes = ["systematic_fix", "accommodation", "noise"]
    assert ratio(classes) == 0.6667 and ratio([]) is None
    edits = [{"class": c} for c in classes]
    assert summarise(edits, "noop", curable=False)["false_acceptances"] == 2
    assert summarise(edits, "default", curable=True)["false_acceptances"] == 0
    assert summarise(edits, None, curable=None)["false_acceptances"] is None
    text = summary_line(summarise(edits, "noop", curable=False))
    assert "t (accepted edits that are not systematic fixes) = 0.67" in text and "false acceptances 2" in text
    assert has_curable_quirks("noop") is False and has_curable_quirks("default") is True


def test_evolution_validity_joins_every_accepted_round_and_step_with_its_runs(tmp_path):
    """A plain accepted round (cures a cut value on two tasks) and a self-evolution round whose second step
    was accepted (a blind spot): one systematic fix, one accommodation, t = 0.5; no ground truth -> None."""
    runs = {name: tmp_path / name for name in ("start", "r1", "r2s1", "r2s2")}
    for row in (
        unseen("1"),
        unseen("2"),
        line(
            "3",
            True,
            [q("blind_spot", "model", effect="wrong_write")],
            {"kind": "blind_spot", "origin": "model", "entry": 0},
        ),
    ):
        write_ground_truth(runs["start"], row)
    for row in (
        line("1", False),
        line("2", False),
        line(
            "3",
            True,
            [q("blind_spot", "model", effect="wrong_write")],
            {"kind": "blind_spot", "origin": "model", "entry": 0},
        ),
    ):
        write_ground_truth(runs["r1"], row)
        write_ground_truth(runs["r2s1"], row)
    for row in (line("1", False), line("2", False), line("3", False, [q("blind_spot", "model", cured=True)])):
        write_ground_truth(runs["r2s2"], row)
    evo = tmp_path / "evo"
    for rel, run in (("rounds/1", "r1"), ("rounds/2/steps/1", "r2s1"), ("rounds/2/steps/2", "r2s2")):
        (evo / rel).mkdir(parents=True)
        (evo / rel / "validation.json").write_text(json.dumps({"run_path": str(runs[run])}))
    doc = {
        "start": {"run_path": str(runs["start"])},
        "test": None,
        "rounds": [
            {"round": 1, "accepted": True, "flips": {"failed_to_solved": [f"{S}/1", f"{S}/2"]}},
            {
                "round": 2,
                "accepted": True,
                "steps": [
                    {"step": 1, "accepted": False, "flips": {"failed_to_solved": []}},
                    {"step": 2, "accepted": True, "flips": {"failed_to_solved": [f"{S}/3"]}},
                ],
            },
        ],
    }
    validity = evolution_validity(doc, evo)
    assert [(e["round"], e["step"], e["class"]) for e in validity["edits"]] == [
        (1, None, "systematic_fix"),
        (2, 2, "accommodation"),
    ]
    assert validity["t"] == 0.5 and validity["false_acceptances"] == 0 and validity["profile"] == "default"
    assert evolution_validity({**doc, "start": {"run_path": str(tmp_path / "none")}}, evo) is None


def test_an_edit_is_judged_against_the_incumbent_rerun_it_was_compared_with(tmp_path):
    """A round decided against the incumbent re-run beside the candidate (`incumbent_run`): the cures are
    read against that re-run's quirks, not the incumbent's earlier run (where the same tasks failed on
    quirks that, in other draws, the candidate never met). Read against the earlier run, this edit, which
    cured an id format on two tasks, was called noise."""
    runs = {name: tmp_path / name for name in ("start", "rerun", "cand")}
    for task in ("1", "2"):
        write_ground_truth(
            runs["start"],
            line(
                task,
                True,
                [q("early_end", "systematic", effect="early_end")],
                {"kind": "early_end", "origin": "systematic", "entry": 0},
            ),
        )
        write_ground_truth(
            runs["rerun"],
            line(
                task,
                True,
                [q("id_case", "systematic", effect="gave_up")],
                {"kind": "id_case", "origin": "systematic", "entry": 0},
            ),
        )
        write_ground_truth(runs["cand"], line(task, False, [q("id_case", "systematic", cured=True)]))
    evo = tmp_path / "evo"
    (evo / "rounds/1").mkdir(parents=True)
    (evo / "rounds/1/validation.json").write_text(json.dumps({"run_path": str(runs["cand"])}))
    row = {"round": 1, "accepted": True, "flips": {"failed_to_solved": [f"{S}/1", f"{S}/2"]}}
    doc = {"start": {"run_path": str(runs["start"])}, "test": None, "rounds": [row]}
    assert evolution_validity(doc, evo)["edits"][0]["class"] == "noise"  # no re-run recorded: the earlier run
    row["incumbent_run"] = {"rescored": True, "run_path": str(runs["rerun"])}
    (edit,) = evolution_validity(doc, evo)["edits"]
    assert edit["class"] == "systematic_fix" and {c["status"] for c in edit["cures"]} == {"cured"}


def test_the_cause_is_the_root_the_failure_rests_on():
    """sim/truth/causes.py: one damaging root is the cause; an unseen value whose lookup a slip bent points to
    the slip; with several roots and no checks known, the first; a model that never closed was ended by a
    limit."""
    from pytest_ecdysis.sim.truth.causes import trial_cause

    slip = q("slip", "model")
    chained = {**q("unseen_value", "harness", effect="wrong_write"), "because": 0}
    assert trial_cause([slip, chained], closed=True)[0] == {"kind": "slip", "origin": "model", "entry": 0}
    early = q("early_end", "systematic", effect="ended_early")
    blind = q("blind_spot", "model", effect="wrong_write")
    cause, causes = trial_cause([early, blind], closed=True)
    assert cause["kind"] == "early_end" and [c["kind"] for c in causes] == ["early_end", "blind_spot"]
    assert trial_cause([q("verbose_rereads", "systematic")], closed=False)[0]["kind"] == "harness_limit"
    assert trial_cause([q("id_case", "systematic", cured=True)], closed=True) == (None, [])


def test_reach_is_the_kinds_whose_cure_share_the_edit_raised_in_its_own_runs():
    """A kind is reached when its cured share rose (cure-flag kinds) or its damaging entries per trial fell
    (harness-origin kinds); a kind the incumbent already cured as often is not the edit's."""
    from pytest_ecdysis.sim.truth.validity import edit_reach

    before = [
        line(
            "1",
            True,
            [
                q("early_end", "systematic", effect="ended_early"),
                q("repeat_after_error", "systematic", cured=True),
            ],
            {"kind": "early_end", "origin": "systematic", "entry": 0},
        ),
        line(
            "2",
            True,
            [
                q("unseen_value", "harness", effect="wrong_write"),
                q("repeat_after_error", "systematic", effect="gave_up"),
            ],
        ),
    ]
    after = [
        line(
            "1",
            False,
            [q("early_end", "systematic", cured=True), q("repeat_after_error", "systematic", cured=True)],
        ),
        line(
            "2",
            True,
            [
                q("unseen_value", "harness", effect="wrong_write"),
                q("repeat_after_error", "systematic", effect="gave_up"),
            ],
        ),
    ]
    assert edit_reach(before, after) == {"early_end"}
    assert edit_reach(before, [line("1", False), line("2", False)]) == {"unseen_value"}
    # a cure the incumbent makes as often is not credited to the edit, even on a flipped task
    cures = edit_cures(before, after, [f"{S}/1"])
    assert [(c["kind"], c["status"]) for c in cures] == [("early_end", "cured")]
    flipped = edit_cures(
        [
            line(
                "3",
                True,
                [q("repeat_after_error", "systematic", effect="gave_up")],
                {"kind": "repeat_after_error", "origin": "systematic", "entry": 0},
            )
        ],
        [line("3", False, [q("repeat_after_error", "systematic", cured=True)])],
        [f"{S}/3"],
        reach={"early_end"},
    )
    assert flipped[0]["status"] == "incumbent_cure" and classify(flipped) == "noise"


def test_a_cure_in_code_counts_as_a_harness_cure_whatever_the_quirk_origin():
    """A slip (a model quirk) the harness rewrote before execution on two tasks (`cured_by: harness`,
    sim/truth/repairs.py) is a systematic fix; cured by information (a rule naming the value) it stays an
    accommodation, as a blind spot does."""
    slip = {"kind": "slip", "origin": "model", "entry": 0}
    before = [line(t, True, [q("slip", "model", effect="wrong_write")], slip) for t in ("1", "2")]
    by_code = [
        line(t, False, [{**q("slip", "model", cured=True), "cured_by": "harness", "harness": "repaired"}])
        for t in ("1", "2")
    ]
    cures = edit_cures(before, by_code, [f"{S}/1", f"{S}/2"])
    assert {(c["status"], c["by"]) for c in cures} == {("cured", "code")}
    assert classify(cures) == "systematic_fix"
    by_info = [line(t, False, [q("slip", "model", cured=True)]) for t in ("1", "2")]
    assert classify(edit_cures(before, by_info, [f"{S}/1", f"{S}/2"])) == "accommodation"


def test_an_edit_is_credited_only_with_the_held_out_cures_its_own_change_makes(tmp_path):
    """Round 1 (a completion check) cures early ends in its own runs and flips task 2, which had failed on a
    repeat loop that simply did not recur; round 2 (a repeat guard) cures repeat loops. The frozen harness
    cured both kinds on the held-out split. Round 1 is not credited with the repeat cures (its own runs
    show none: noise); round 2 is (a systematic fix). With round 1 as the only accepted edit, the frozen
    harness is round 1 and start -> frozen on test is its own before/after: then it is credited."""
    end = {"kind": "early_end", "origin": "systematic", "entry": 0}
    rep = {"kind": "repeat_after_error", "origin": "systematic", "entry": 0}
    runs = {n: tmp_path / n for n in ("start", "r1", "r2", "test_start", "test_frozen")}
    rows = {
        "start": [
            line("1", True, [q("early_end", "systematic", effect="ended_early")], end),
            line("2", True, [q("repeat_after_error", "systematic", effect="gave_up")], rep),
            line("3", True, [q("repeat_after_error", "systematic", effect="gave_up")], rep),
        ],
        "r1": [
            line(
                "1",
                True,
                [q("early_end", "systematic", cured=True), q("slip", "model", effect="wrong_write")],
                {"kind": "slip", "origin": "model", "entry": 1},
            ),
            line("2", False),
            line("3", True, [q("repeat_after_error", "systematic", effect="gave_up")], rep),
        ],
        "r2": [
            line("1", False),
            line("2", False),
            line("3", False, [q("repeat_after_error", "systematic", cured=True)]),
        ],
        "test_start": [
            line("9", True, [q("early_end", "systematic", effect="ended_early")], end),
            line("8", True, [q("repeat_after_error", "systematic", effect="gave_up")], rep),
        ],
        "test_frozen": [
            line("9", False, [q("early_end", "systematic", cured=True)]),
            line("8", False, [q("repeat_after_error", "systematic", cured=True)]),
        ],
    }
    for name, lines in rows.items():
        for row in lines:
            write_ground_truth(runs[name], row)
    evo = tmp_path / "evo"
    for n in ("1", "2"):
        (evo / "rounds" / n).mkdir(parents=True)
        (evo / "rounds" / n / "validation.json").write_text(json.dumps({"run_path": str(runs[f"r{n}"])}))
    test = {"start": {"run_path": str(runs["test_start"])}, "frozen": {"run_path": str(runs["test_frozen"])}}
    doc = {
        "start": {"run_path": str(runs["start"])},
        "test": test,
        "rounds": [
            {"round": 1, "accepted": True, "flips": {"failed_to_solved": [f"{S}/2"]}},
            {"round": 2, "accepted": True, "flips": {"failed_to_solved": [f"{S}/1", f"{S}/3"]}},
        ],
    }
    validity = evolution_validity(doc, evo)
    first, second = validity["edits"]
    assert validity["held_out_kinds"] == ["early_end", "repeat_after_error"]
    assert first["reach"] == ["early_end"] and first["held_out_kinds"] == ["early_end"]
    assert [(c["task"], c["kind"], c["status"]) for c in first["cures"]] == [
        (f"{S}/2", "repeat_after_error", "not_drawn")
    ]
    assert first["class"] == "noise"
    assert "repeat_after_error" in second["reach"] and second["class"] == "systematic_fix"
    only_first = {**doc, "rounds": [doc["rounds"][0], {"round": 2, "accepted": False}]}
    (alone,) = evolution_validity(only_first, evo)["edits"]
    assert (
        alone["held_out_kinds"] == ["early_end", "repeat_after_error"] and alone["class"] == "systematic_fix"
    )
