"""A value the simulated model got wrong is cured by the information, in any channel a
real model reads — system, developer, a user-role note of the harness, the tool error answering the call,
the tool result of a call the harness repaired — by one rule per quirk kind (docs/simulated-model.md,
"Values in any channel"). Real HTTP, the toy suite (tests/sim_toy.py)."""

from __future__ import annotations

import json

import pytest
from sim_toy import ORDER_1, ORDER_2, PAYMENT, USER_ID, ToyHarness, ToyKnowledge, write_profile

from pytest_ecdysis.sim.client import fetch_ground_truth
from pytest_ecdysis.sim.server import start_background

#: Every value of the toy task a harness could know (its records and the tools' documented reasons).
KNOWN = [USER_ID, ORDER_1, ORDER_2, PAYMENT, "no longer needed"]


@pytest.fixture(scope="module")
def server():
    handle = start_background(knowledge={"toy": ToyKnowledge()})
    yield handle
    handle.stop()


@pytest.fixture
def sim(server, tmp_path_factory, monkeypatch):
    """The module's server, with this test's profile directory set only while the test runs (other
    modules' tests may run in this worker between ours)."""
    directory = tmp_path_factory.mktemp("profiles")
    monkeypatch.setenv("ECDYSIS_SIM_PROFILES", str(directory))
    return server, directory


def candidates(tool, arg, value):
    """The values `arg` of `tool` takes in the toy's records other than the one sent (what a harness that
    knows the records can offer: 'did you mean ...?')."""
    from sim_toy import toy_task

    return sorted(
        {str(s.arguments[arg]) for s in toy_task().plan if s.name == tool and arg in s.arguments}
        - {str(value)}
    )


def did_you_mean(tool, args):
    out = ""
    for arg, value in args.items():
        offered = candidates(tool, arg, value)
        if offered and isinstance(value, str):
            out += f" Did you mean {' or '.join(offered)} for {arg}?"
    return out


def repair(tool, args):
    """Executes the record value that equals the one sent up to case, spaces and '#', else the only record
    value of that argument (no guess when two are as near)."""
    fold = lambda v: str(v).strip().lstrip("#").lower()  # noqa: E731
    out = dict(args)
    for arg, value in args.items():
        offered = candidates(tool, arg, value)
        same = [c for c in offered if fold(c) == fold(value)]
        if isinstance(value, str) and (same or len(offered) == 1):
            out[arg] = (same or offered)[0]
    return out


LISTED = "Values on file for this customer: " + ", ".join(KNOWN) + "."
CHANNELS = {
    "none": {},
    "system": {"system_prompt": "You are a customer service agent. " + LISTED},
    "developer": {"developer": LISTED},
    "user_note": {"note_after_error": lambda tool, args: "Harness note:" + did_you_mean(tool, args)},
    "tool_error": {"error_suffix": did_you_mean},
    "tool_result": {"repair": repair},
}
#: quirk kind -> (profile quirks, profile extras, harness settings that make it fire)
KINDS = {
    "blind_spot": ({"blind_spot": {"task_rate": 1.0, "rate": 1.0}}, {}, {"truncate_at": None}),
    "slip": ({"slip": {"rate": 1.0}}, {}, {"truncate_at": None}),
    "context_loss": ({"context_loss": {"rate": 1.0}}, {"recall_chars": 50}, {"truncate_at": None}),
    "unseen_value": ({}, {}, {"truncate_at": 1200}),
    "id_case": ({"id_case": {"rate": 1.0}}, {}, {"truncate_at": None}),
    "id_prefix": ({"id_prefix": {"rate": 1.0}}, {}, {"truncate_at": None}),
}


def play(sim, kind, channel, trial, tag=""):
    handle, directory = sim
    quirks, extra, harness = KINDS[kind]
    model = write_profile(directory, f"ch_{kind}", quirks)
    path = directory / f"ch_{kind}.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **extra}))
    header = f"{kind}-{channel}{tag}/toy/1/{trial}"  # one trial state per run on the shared server
    result = ToyHarness(**harness, **CHANNELS[channel], max_calls=40).run(handle.url, header, model=model)
    return result, fetch_ground_truth(handle.url, header)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("channel", [c for c in CHANNELS if c != "none"])
def test_a_wrong_value_is_cured_by_the_right_value_in_any_channel(sim, kind, channel):
    """Without the information the trial fails on the kind; with the right value in any channel, every
    entry of the kind is cured (or, told before the call, never fires) and the trial is solved. The
    tool-result channel is a harness that repaired the call: it is judged on the calls it could repair."""
    bad, truth = play(sim, kind, "none", 0, tag=f"-for-{channel}")
    entries = [q for q in truth["quirks"] if q["kind"] == kind]
    assert entries and not all(q["cured"] for q in entries) and not bad["solved"]
    good, truth = play(sim, kind, channel, 0)
    entries = [q for q in truth["quirks"] if q["kind"] == kind]
    writes = {"modify_order_payment", "cancel_order"}
    judged = [
        q for q in entries if channel != "tool_result" or q.get("tool") in writes
    ]  # a read: no unique repair
    assert all(q["cured"] for q in judged), (channel, entries)
    if not (channel == "tool_result" and kind == "slip"):  # a slip in a read of one of two orders: no repair
        assert good["solved"], (channel, truth["quirks"])
    by = {q.get("by") for q in entries}
    if channel == "tool_result" and entries:
        assert by & {"harness_repair", None}  # id bends: the right record came back (the existing rule)


def test_a_message_without_the_value_corrects_nothing(sim):
    """The same channels carrying no value (a generic 'check your arguments') cure nothing."""
    handle, directory = sim
    model = write_profile(directory, "ch_blind_none", {"blind_spot": {"task_rate": 1.0, "rate": 1.0}})
    harness = ToyHarness(
        truncate_at=None,
        error_suffix=lambda t, a: " Please check your arguments.",
        note_after_error=lambda t, a: "Check the values you sent.",
        developer="Be careful.",
    )
    result = harness.run(handle.url, "generic/toy/1/0", model=model)
    truth = fetch_ground_truth(handle.url, "generic/toy/1/0")
    spot = [q for q in truth["quirks"] if q["kind"] == "blind_spot"]
    assert spot and not spot[0]["cured"] and not result["solved"]
