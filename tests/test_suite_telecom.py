"""τ² telecom, the dual-control suite: its tasks and splits, the user who runs tools on their own
phone (simulated and scripted user models alike), the user's calls recorded as the user's, the simulated
model acting in the domain from the request only, and bad input: a user model calling a tool it does not
have, a user tool that raises, a task environment that breaks between turns, a telecom id given to the
airline suite."""

from __future__ import annotations

import json

import pytest
from suite_scripted import EXAMPLE_HARNESS, ScriptedModel, call, run, text

pytest.importorskip("tau2")

from pytest_ecdysis.core.errors import UsageError  # noqa: E402
from pytest_ecdysis.evidence.failures import to_record  # noqa: E402
from pytest_ecdysis.evidence.views import record_view  # noqa: E402
from pytest_ecdysis_tau2.tasks import suite  # noqa: E402
from pytest_ecdysis_tau2.trial.endpoint import EndpointSettings  # noqa: E402

#: a telecom task whose gold plan is one user step (toggle_data) and one account write (refuel_data).
TASK = "[mobile_data_issue]data_mode_off|data_usage_exceeded[PERSONA:None]"
FAST = EndpointSettings(call_timeout_s=5.0, max_retries=0, trial_budget_s=120.0, backoff_s=0.01)


def test_splits_are_taus_base_tasks_train_74_test_40():
    """The suite offers telecom's `base` set from τ²'s split_tasks.json (not the 2,285 generated tasks of
    tasks.json): 74 train and 40 test tasks, disjoint, 114 in all."""
    train, test, every = (suite.split_ids("telecom", s) for s in ("train", "test", "all"))
    assert (len(train), len(test), len(every)) == (74, 40, 114)
    assert not set(train) & set(test) and set(train) | set(test) == set(every)
    assert suite.suite_name("telecom") == "tau2-telecom"


def test_a_telecom_case_id_names_its_suite_and_task():
    """The controller's checks map a telecom node id (brackets and bars in the task id) back to its task."""
    from pytest_ecdysis_tau2.registration import ecdysis_case_task

    nodeid = f"pytest_ecdysis_tau2/test_telecom.py::test_telecom[{TASK}-t2]"
    assert ecdysis_case_task(nodeid) == ("tau2-telecom", TASK)


def test_a_telecom_task_id_given_to_the_airline_suite_is_a_usage_error_naming_where_it_lives():
    """`--ecdysis-tasks <telecom id>` with only the airline suite collected stops before any trial, saying the
    id is telecom's and that its test module was not collected."""
    from pytest_ecdysis.run.selection import Collected, check_tasks

    collected = Collected(cases={"tau2-airline/0": ["x::test_airline[0-t0]"]}, suites={"tau2-airline"})
    with pytest.raises(UsageError, match=r"is a task of tau2-telecom, whose tests were not collected"):
        check_tasks((TASK,), "train", collected)


class _ZeroScorer:
    """A scorer that answers reward 0 (the scorer process cannot see a tool patched in this one)."""

    def start(self, domain=None):  # ScorerClient.start(domain)
        pass

    def score(self, domain, task_id, simulation_json):
        return {"reward": 0.0, "components": {"env_assertion": 0.0}, "checks": None}


def _user(*replies):
    return ScriptedModel(list(replies))


def test_a_scripted_user_model_runs_its_own_tool_and_the_call_is_recorded_as_the_users():
    """A real (here scripted) user model is offered τ²'s user tools; its tool call goes to the environment with
    requestor `user`, the result comes back to it, and the trial records the call in `user_tool_calls`
    (actor `user`, with τ²'s result), never in the agent's `tool_calls`; the messages mark it too."""
    user = _user(
        text("My mobile data does not work. I am John Smith, 555-123-2002."),
        call("toggle_data", "{}", call_id="u1"),
        text("Data is on now. ###STOP###"),
    )
    agent = ScriptedModel([text("Could you toggle your mobile data?")])
    result = run(TASK, agent, domain="telecom", user=user, settings=FAST)
    assert result.termination_reason == "user_stop", result.error
    assert [c.name for c in result.tool_calls] == []
    (mine,) = result.user_tool_calls
    assert (mine.name, mine.actor, mine.error) == ("toggle_data", "user", False)
    assert "Mobile Data is now ON" in mine.result
    offered = {t["function"]["name"] for t in user.requests[1]["tools"]}
    assert {"toggle_data", "toggle_airplane_mode", "run_speed_test"} <= offered
    assert any(m.get("role") == "tool" and m.get("requestor") == "user" for m in result.messages)
    # the user's own result reached the user model as a tool message, and never the agent
    assert any(
        m["role"] == "tool" and "Mobile Data is now ON" in m["content"] for m in user.requests[2]["messages"]
    )
    assert all("Mobile Data is now ON" not in json.dumps(r["messages"]) for r in agent.requests)


def test_a_user_model_calling_a_tool_it_does_not_have_ends_as_user_error_with_the_conversation_kept():
    """The user model names a tool the task's user lacks: the trial ends `user_error`, flagged `user_abort`
    (kept out of the evidence: the user simulator's fault), the error names the tool and the tools it has,
    and the conversation so far is kept."""
    user = _user(text("My data is broken, I am John Smith, 555-123-2002."), call("fly_to_the_moon", "{}"))
    agent = ScriptedModel([text("Could you toggle your mobile data?")])
    result = run(TASK, agent, domain="telecom", user=user, settings=FAST)
    assert result.termination_reason == "user_error" and result.user_abort
    assert (
        "'fly_to_the_moon'" in result.error
        and "toggle_data" in result.error
        and "not the agent's" in result.error
    )
    assert result.reward == 0.0 and not result.is_infra_error
    assert any("toggle your mobile data" in (m.get("content") or "") for m in result.messages)
    assert to_record(result).user_abort


def test_a_user_tool_that_raises_is_an_error_result_of_the_users_call_in_the_record(monkeypatch):
    """A user tool that raises inside τ² comes back to the user as τ²'s error result; the record shows it as
    the user's failed call (and the failure record's view says these calls are the user's), while the
    agent's first tool error stays empty."""
    from tau2.domains.telecom.user_tools import TelecomUserTools

    def toggle_data(self):
        """Toggles your phone's mobile data connection ON or OFF."""
        raise RuntimeError("the radio firmware crashed")

    monkeypatch.setattr(
        TelecomUserTools, "toggle_data", toggle_data
    )  # τ² names a tool by its function's name
    user = _user(
        text("My data is broken, I am John Smith, 555-123-2002."),
        call("toggle_data", "{}"),
        text("It says the radio firmware crashed. ###STOP###"),
    )
    agent = ScriptedModel([text("Could you toggle your mobile data?")])
    # the scorer process replays the trajectory with τ²'s own (unpatched) tool, which would not raise there
    result = run(TASK, agent, domain="telecom", user=user, settings=FAST, scorer=_ZeroScorer())
    assert result.termination_reason == "user_stop" and result.reward == 0.0
    (mine,) = result.user_tool_calls
    assert mine.error and "radio firmware crashed" in mine.result
    record = to_record(result)
    assert record.first_tool_error is None and record.user_tool_calls[0].error
    view = record_view(record)
    assert view["user_tool_calls"][0]["name"] == "toggle_data" and "user's own" in view["user_tool_calls_are"]
    assert any(item.get("actor") == "user" for item in record.excerpt) or len(record.excerpt) < len(
        result.messages
    )


def test_a_task_environment_that_breaks_between_turns_is_an_infrastructure_error_naming_the_task(monkeypatch):
    """τ²'s telecom environment raising in its between-turn sync (a scenario the database cannot hold) is the
    task's defect: infrastructure_error naming the suite and task, never the agent's failure."""
    from tau2.domains.telecom.environment import TelecomEnvironment

    def broken(self):
        if self.user_tools.db.surroundings.phone_number is not None:  # once the task's scenario is applied
            raise ValueError("Wrong scenario, line not found for phone number: 555-000-0000")

    monkeypatch.setattr(TelecomEnvironment, "sync_tools", broken)
    result = run(TASK, ScriptedModel([text("Hello")]), domain="telecom", settings=FAST)
    assert result.termination_reason == "infrastructure_error" and result.is_infra_error
    assert "tau2-telecom task" in result.error and TASK in result.error and "not of the agent" in result.error


def test_the_simulated_agent_and_user_solve_a_telecom_task_through_the_user_step():
    """With the simulated model for both roles, the agent asks for the user step in words, the simulated user
    finds the tool among the schemas it was offered and runs it, reports what the phone shows, and the
    agent's account write follows (lookups first); τ²'s environment assertions then score it."""
    from pytest_ecdysis.core.harness import harness_id
    from pytest_ecdysis.sim.server import start_background
    from pytest_ecdysis_tau2.trial.runner import TrialSpec, run_trial

    handle = start_background(nonce="fixed")
    try:
        spec = TrialSpec(
            domain="telecom",
            task_id=TASK,
            trial=0,
            run_id="tel",
            model="sim/noop",
            user_model="sim",
            harness_dir=EXAMPLE_HARNESS,
            harness_id=harness_id(EXAMPLE_HARNESS),
            sim_url=handle.url,
        )
        result = run_trial(spec, FAST)
    finally:
        handle.stop()
    assert result.termination_reason == "user_stop", result.error
    assert [(c.name, c.actor) for c in result.user_tool_calls] == [("toggle_data", "user")]
    assert [c.name for c in result.tool_calls] == [
        "get_customer_by_phone",
        "get_details_by_id",
        "refuel_data",
    ]
    assert result.reward == 1.0 and result.components == {"env_assertion": 1.0}
    asked = [
        m["content"]
        for m in result.messages
        if m["role"] == "assistant" and "toggle data" in (m["content"] or "")
    ]
    assert asked and "on your phone" in asked[0]


def test_the_simulated_user_reads_which_of_its_tools_the_words_ask_for():
    """Every user step of τ²'s 114 telecom gold plans, asked the way the simulated agent asks, maps back to
    exactly that tool and arguments; plain phrasings a real agent uses map by verb synonyms and the tool's
    description; words that ask for nothing map to no tool; a missing required argument is asked for."""
    from pytest_ecdysis.sim.agent.user_steps import ask_text
    from pytest_ecdysis.sim.user.tools import requested_call

    env = suite.get_environment("telecom")
    tools = [t.openai_schema for t in env.get_user_tools()]
    steps = [
        (a.name, dict(a.arguments))
        for task in suite.all_tasks("telecom").values()
        for a in task.evaluation_criteria.actions or []
        if a.requestor == "user"
    ]
    assert len(steps) == 393
    assert [s for s in steps if requested_call(ask_text(*s), tools) != s] == []
    assert requested_call("Could you turn off airplane mode?", tools) == ("toggle_airplane_mode", {})
    assert requested_call("Please turn on data roaming", tools) == ("toggle_roaming", {})
    assert requested_call("Please grant the messaging app the sms permission.", tools) == (
        "grant_app_permission",
        {"app_name": "messaging", "permission": "sms"},
    )
    assert requested_call("Can you restart your device?", tools) == ("reboot_device", {})
    assert requested_call("Hello, how can I help you today?", tools) is None
    assert requested_call("Please grant the app permission", tools) == ("?", "app_name")


def test_the_html_page_and_the_evidence_mark_the_users_own_tool_calls():
    """The report's conversation view flags the user's own tool call and its result (`by_user`), the agent's
    not; the failure record's excerpt marks them `actor: user`, and the roles' view keeps the mark."""
    from pytest_ecdysis.core.records import ToolCallRecord, TrialResult
    from pytest_ecdysis.evidence.views import _message_view
    from pytest_ecdysis.report.html_view import _message_view as html_messages

    messages = [
        {"role": "assistant", "content": "Could you toggle your data?"},
        {
            "role": "user",
            "content": None,
            "tool_calls": [{"id": "u1", "name": "toggle_data", "arguments": {}}],
            "requestor": "user",
        },
        {
            "role": "tool",
            "content": "Mobile Data is now ON.",
            "id": "u1",
            "error": False,
            "requestor": "user",
        },
        {"role": "user", "content": "It is on now. ###STOP###"},
    ]
    shown = html_messages({"messages": messages, "tool_calls": []})
    assert [m["by_user"] for m in shown] == [False, True, True, False]
    trial = TrialResult(
        suite="tau2-telecom",
        task_id=TASK,
        trial=0,
        reward=0.0,
        termination_reason="user_stop",
        components={"env_assertion": 0.0},
        messages=messages,
        user_tool_calls=[
            ToolCallRecord(
                name="toggle_data", arguments={}, result="Mobile Data is now ON.", step=1, actor="user"
            )
        ],
    )
    record = to_record(trial)
    assert [item.get("actor") for item in record.excerpt] == [None, "user", "user", None]
    assert [_message_view(item).get("actor") for item in record.excerpt] == [None, "user", "user", None]
    assert record_view(record)["user_tool_calls"][0]["result"] == "Mobile Data is now ON."


def test_a_pass_won_by_the_users_own_tool_calls_is_not_a_weak_pass():
    """In telecom the fix is often the user's device actions alone: a pass with user tool calls and no agent
    call is not flagged "no tool call"; a pass with no call of either side still is."""
    from pytest_ecdysis.core.metrics import weak_pass_reasons
    from pytest_ecdysis.core.records import ToolCallRecord, TrialResult

    def passed(user_calls):
        return TrialResult(
            suite="tau2-telecom",
            task_id=TASK,
            trial=0,
            reward=1.0,
            termination_reason="user_stop",
            components={"env_assertion": 1.0},
            checks={"communicate": []},
            user_tool_calls=user_calls,
        )

    mine = [ToolCallRecord(name="toggle_data", arguments={}, result="ON", step=3, actor="user")]
    assert weak_pass_reasons(passed(mine), 1.0) == []
    assert weak_pass_reasons(passed([]), 1.0) == ["no tool call"]


def _recorded(kind: str | None = None):
    from test_replies_replay import fixtures

    return [p for p in fixtures("agent") if kind is None or p.values[0]["kind"] == kind]


@pytest.mark.parametrize("doc", _recorded())
def test_every_recorded_real_reply_as_the_telecom_agent_ends_in_a_clear_record(doc):
    """Recorded replies of real servers and small models (llama.cpp's SmolLM2 and Gemma among them) as the
    agent's first answer in a telecom trial: each ends with a termination reason, and every ending other
    than the user's stop carries an error saying what happened; nothing crashes."""
    from test_replies_replay import response

    follow = [] if doc["kind"] == "empty" else [text("Could you toggle your mobile data?")]
    user = _user(text("My data is broken, I am John Smith, 555-123-2002."), text("Thanks. ###STOP###"))
    result = run(
        TASK,
        ScriptedModel([response(doc), *follow]),
        domain="telecom",
        user=user,
        settings=EndpointSettings(max_retries=0, call_timeout_s=5.0, trial_budget_s=120.0),
    )
    assert result.termination_reason in {
        "user_stop",
        "endpoint_format_error",
        "context_overflow",
        "infrastructure_error",
    }
    assert result.termination_reason == "user_stop" or result.error
    if doc["kind"] == "tool_call":  # an airline call the telecom agent does not have: τ²'s error result
        assert result.tool_calls and result.tool_calls[0].error


@pytest.mark.parametrize("doc", _recorded("tool_call")[:2] + _recorded("text")[:2])
def test_a_recorded_real_reply_as_the_telecom_user_ends_in_a_clear_record(doc):
    """The same recorded replies as the *user* model of a telecom trial: text is the user's words; a tool call
    of a tool the user does not have ends `user_error` naming it (the user model's fault)."""
    from test_replies_replay import response

    user = ScriptedModel(
        [text("My data is broken, I am John Smith, 555-123-2002."), response(doc), text("###STOP###")]
    )
    result = run(
        TASK,
        ScriptedModel([text("Could you toggle your mobile data?")]),
        domain="telecom",
        user=user,
        settings=FAST,
    )
    if doc["kind"] == "tool_call":
        assert result.termination_reason == "user_error" and "not have" in result.error
    else:
        assert result.termination_reason == "user_stop", result.error


def test_a_usage_error_listing_telecom_ids_stays_readable():
    """An id of no suite, with telecom collected, lists each suite's valid ids bounded in characters (telecom
    ids run to 200 characters), ending with how many there are."""
    from pytest_ecdysis.run.selection import Collected, check_tasks

    collected = Collected(cases={}, suites={"tau2-airline", "tau2-telecom"})
    with pytest.raises(UsageError) as caught:
        check_tasks(("9999",), "train", collected)
    said = str(caught.value)
    assert "9999 is a task of no installed suite" in said and "tau2-telecom: [" in said
    assert "(74 in all)" in said and len(said) < 2000
