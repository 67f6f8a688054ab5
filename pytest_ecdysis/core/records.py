"""The pipeline's nouns: trial results, failure records, pattern groups, modification specs, rounds.

The evolution loop's own files are typed as `TypedDict`s (`RoundRecord`, `DecisionRecord`, `EvolutionRecord`):
they are plain dicts at run time, so what is written (keys, their order, values) is what the code builds.

These are the shapes other parts, the run directory files and users' scripts rely on (docs/records.md lists them).
All are pydantic models so JSON goes in and out validated; field names carry units (`wall_s`,
`cost_usd`). This module must not import tau2, the task suites or any harness.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = 1

#: τ²'s own termination reasons plus the ones pytest-ecdysis adds.
TerminationReason = Literal[
    "user_stop",
    "agent_stop",
    "max_steps",
    "too_many_errors",
    "agent_error",
    "user_error",
    "judge_stop",
    "infrastructure_error",
    "endpoint_format_error",
    "time_budget_exceeded",
    "context_overflow",
]

#: Termination reasons that are never the agent's fault: never a failure record, never evidence.
INFRA_REASONS = frozenset({"infrastructure_error", "time_budget_exceeded"})

#: Reward components of τ²'s evaluator (one evaluator file per component; reward = product).
RewardComponent = Literal["db", "communicate", "action", "env_assertion", "nl_assertion"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=False)


class ToolCallRecord(_Model):
    """One tool call and what came back: the agent's, or the user's own (`actor`)."""

    name: str
    arguments: Annotated[dict[str, Any], Field(description="arguments as sent to the environment")]
    result: Annotated[
        str | None, Field(description="tool result content; None when the call had no result")
    ] = None
    error: Annotated[bool, Field(description="the environment reported an error")] = False
    model_view: Annotated[
        str | None,
        Field(
            description="the tool message content the harness actually sent to the model for this call, "
            "observed on the wire (None: never sent, or not observed)"
        ),
    ] = None
    step: Annotated[int | None, Field(description="index of the message in the trajectory")] = None
    actor: Annotated[
        Literal["agent", "user"],
        Field(
            description="who called the tool: the agent, or the user on their own device (dual control, "
            "e.g. τ² telecom); the agent never sees the user's calls or their results"
        ),
    ] = "agent"


class TrialResult(_Model):
    """One trial (one task run once) as the worker reports it to the controller.

    Carried on the pytest call report as `report.ecdysis_trial` (a JSON-safe dict made with
    `model_dump(mode="json")`), never only in `config.workeroutput` (which xdist hands over only when a worker ends).
    """

    schema_version: int = SCHEMA_VERSION
    suite: Annotated[str, Field(description="e.g. 'tau2-airline'")]
    task_id: str
    trial: Annotated[int, Field(ge=0, description="0-based trial index")]
    nodeid: str = ""
    reward: Annotated[float | None, Field(description="in [0, 1]; None for infrastructure errors")] = None
    components: Annotated[
        dict[str, float], Field(description="reward per component, e.g. {'db': 1.0, 'communicate': 0.0}")
    ] = Field(default_factory=dict)
    termination_reason: TerminationReason
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    user_tool_calls: Annotated[
        list[ToolCallRecord],
        Field(
            description="the user's own tool calls (dual control, e.g. τ² telecom), actor 'user'; [] when "
            "the user has no tools"
        ),
    ] = Field(default_factory=list)
    steps: Annotated[int, Field(description="messages in the trajectory")] = 0
    tokens: Annotated[dict[str, int], Field(description="{'prompt', 'completion', 'total'} of the agent")] = (
        Field(default_factory=lambda: {"prompt": 0, "completion": 0, "total": 0})
    )
    user_tokens: Annotated[
        dict[str, int], Field(description="{'prompt', 'completion', 'total'} of the user simulator")
    ] = Field(default_factory=lambda: {"prompt": 0, "completion": 0, "total": 0})
    wall_s: float = 0.0
    harness_id: str = ""
    model: str = ""
    suspect: Annotated[bool, Field(description="the task's gold data is known to be inconsistent")] = False
    messages: Annotated[
        list[dict[str, Any]], Field(description="the conversation as {role, content, tool_calls?} dicts")
    ] = Field(default_factory=list)
    harness_notes: Annotated[
        list[dict[str, Any]],
        Field(
            description="recorded harness decisions, e.g. repaired endpoint replies: {'kind', 'detail', 'step'}"
        ),
    ] = Field(default_factory=list)
    error: Annotated[str | None, Field(description="infrastructure or endpoint error text")] = None
    pending_call: Annotated[
        dict[str, Any] | None,
        Field(
            description="time_budget_exceeded only: the model call in flight when the budget ran out, "
            "{'role', 'url', 'phase' (connect|headers|body|backoff), 'waited_s', 'bytes'}"
        ),
    ] = None
    endpoint_notes: Annotated[
        list[dict[str, Any]],
        Field(
            description="what the trusted client layer saw of the agent's endpoint and did about it: "
            "{'kind' (text_tool_calls|server_parse_error|reasoning_stripped|request_refused|...), 'detail', "
            "'step'}; request_refused also has 'status'"
        ),
    ] = Field(default_factory=list)
    endpoint_problem: Annotated[
        bool,
        Field(
            description="the agent's endpoint wrote tool calls as text or failed to parse the model's "
            "output (also every endpoint_format_error)"
        ),
    ] = False
    user_stop_after_confirmation: Annotated[
        bool,
        Field(
            description="the user simulator stopped in the message that confirmed the agent's yes/no "
            "question, so the confirmed write never happened (a benchmark artefact)"
        ),
    ] = False
    user_abort: Annotated[
        bool,
        Field(
            description="the user simulator ended the conversation in a way that is not the agent's "
            "doing: τ²'s ###OUT-OF-SCOPE### (its scenario did not cover what came up), a ###TRANSFER### "
            "the agent never asked for, a ###STOP### before any request, or τ² ended it as user_error "
            "(a malformed user message): the user simulator's own abort, not the agent's failure"
        ),
    ] = False
    checks: Annotated[
        dict[str, Any] | None,
        Field(
            description="what τ²'s evaluator saw: {'db_match', 'db_diff' (db failures), 'communicate': "
            "[{'info', 'met', 'message_index', 'matched'}], 'actions': [{'name', 'match'}], 'note'}"
        ),
    ] = None

    @field_validator("harness_notes", mode="before")
    @classmethod
    def _notes_json_safe(cls, notes: Any) -> Any:
        return json_safe_notes(notes)

    @property
    def is_infra_error(self) -> bool:
        return self.termination_reason in INFRA_REASONS


def _jsonable(value: Any) -> tuple[Any, bool]:
    """(a JSON-safe form of `value`, whether anything had to be converted): an Enum member becomes its
    value, anything else JSON cannot carry its `repr`; dicts and lists are converted item by item."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value, False
    if isinstance(value, Enum):
        return _jsonable(value.value)[0], True
    if isinstance(value, dict):
        pairs = [(str(k), *_jsonable(v)) for k, v in value.items()]
        return {k: v for k, v, _ in pairs}, any(c for _, _, c in pairs) or any(
            not isinstance(k, str) for k in value
        )
    if isinstance(value, (list, tuple)):
        items = [_jsonable(v) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    return repr(value), True


def json_safe_notes(notes: Any) -> Any:
    """Harness notes as JSON-safe dicts: a harness may record an Enum member or any object
    in `harness_notes`, and one such value used to lose the whole trial at serialisation. Values JSON cannot
    carry are converted (`_jsonable`) and the note is flagged with `unserialisable: [keys]`; a note that is
    not a dict becomes `{"kind": "note", "detail": <its JSON-safe form>}` (flagged the same way).
    Anything but a list or tuple is returned as is (pydantic then reports it)."""
    if not isinstance(notes, (list, tuple)):
        return notes
    out = []
    for note in notes:
        if not isinstance(note, dict):
            detail, changed = _jsonable(note)
            out.append(
                {"kind": "note", "detail": detail, **({"unserialisable": ["detail"]} if changed else {})}
            )
            continue
        safe, flagged = {}, []
        for key, value in note.items():
            safe[str(key)], changed = _jsonable(value)
            if changed:
                flagged.append(str(key))
        if flagged:
            safe["unserialisable"] = flagged
        out.append(safe)
    return out


class FailureRecord(_Model):
    """One failed trial (reward < λ, not an infrastructure error), as evidence for diagnosis."""

    suite: str
    task_id: str
    trial: int
    reward: float
    termination_reason: TerminationReason
    failed_components: list[RewardComponent] = Field(default_factory=list)
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    user_tool_calls: Annotated[
        list[ToolCallRecord], Field(description="the user's own tool calls (actor 'user'), as in TrialResult")
    ] = Field(default_factory=list)
    first_tool_error: Annotated[
        dict[str, Any] | None, Field(description="{'name', 'arguments', 'result', 'step'}")
    ] = None
    pending_tool_call: Annotated[
        bool, Field(description="the trial ended with a tool call that got no result")
    ] = False
    excerpt: Annotated[list[dict[str, Any]], Field(description="bounded slice of the conversation")] = Field(
        default_factory=list
    )
    harness_notes: list[dict[str, Any]] = Field(default_factory=list)
    suspect: bool = False
    harness_id: str = ""
    endpoint_problem: Annotated[
        bool,
        Field(
            description="ended as endpoint_format_error, or the agent's endpoint wrote tool calls as "
            "text or failed to parse the model's output: not the agent's behaviour"
        ),
    ] = False
    user_stop_after_confirmation: Annotated[
        bool,
        Field(
            description="the user stopped right after the agent's confirmation request, with no write "
            "following (scored, as τ² does, but not the agent's fault)"
        ),
    ] = False
    user_abort: Annotated[
        bool,
        Field(
            description="the user simulator aborted (τ²'s ###OUT-OF-SCOPE###, a ###TRANSFER### the agent "
            "never asked for, a ###STOP### before any request; scored as τ² does, not the agent's failure)"
        ),
    ] = False
    db_diff: Annotated[
        list[dict[str, Any]] | None,
        Field(
            description="db failures: records and fields where the agent's final DB differs from the gold one, "
            "[{'path', 'agent', 'gold'}] (bounded)"
        ),
    ] = None
    kept_out: Annotated[
        str | None,
        Field(
            description="why the record is not evidence for diagnosis: 'suspect', 'endpoint_problem', "
            "'user_stop_after_confirmation', 'user_abort', 'suspect_task'; None: evidence"
        ),
    ] = None

    def is_evidence(self) -> bool:
        """Diagnosis may use this record: not of a suspect task, not an endpoint defect, not a user stop
        right after a confirmation request, not an infrastructure error (records of older runs included)."""
        return not (
            self.kept_out
            or self.suspect
            or self.endpoint_problem
            or self.user_stop_after_confirmation
            or self.user_abort
            or self.termination_reason in INFRA_REASONS
            or self.termination_reason == "endpoint_format_error"
        )


class PatternGroup(_Model):
    """Failure records sharing a deterministic signature (`groups.json`)."""

    signature: str
    cross_task: bool
    tasks: list[str]
    records: Annotated[list[str], Field(description="record keys '<suite>/<task_id>/t<trial>'")]
    termination_reason: str = ""
    failed_components: list[str] = Field(default_factory=list)
    tool: str | None = None
    error_class: str | None = None
    endpoint_problem: Annotated[bool, Field(description="records ended as endpoint_format_error")] = False


class SpecChange(_Model):
    """One change a modification spec asks for."""

    component: Literal[
        "policy_prompt", "tool_interface", "environment_contract", "trajectory_regulation", "skills"
    ]
    files: Annotated[list[str], Field(description="paths relative to the harness directory")]
    description: str
    trigger: Annotated[str, Field(description="when the changed behaviour applies")] = ""
    addresses: Annotated[list[str], Field(description="pattern group signatures")] = Field(
        default_factory=list
    )
    expected_effect: str = ""
    risks: list[str] = Field(default_factory=list)
    guards: list[str] = Field(default_factory=list)
    parameters: Annotated[
        dict[str, Any],
        Field(description="machine-readable parameters, e.g. {'knob': 'max_model_calls', 'value': 40}"),
    ] = Field(default_factory=dict)


class LeftAlone(_Model):
    signature: str
    reason: str


class ModificationSpec(_Model):
    """The Moderator's structured output (`spec.json`)."""

    schema_version: int = SCHEMA_VERSION
    summary: str
    changes: list[SpecChange] = Field(default_factory=list)
    left_alone: list[LeftAlone] = Field(default_factory=list)
    watch_tasks: list[str] = Field(default_factory=list)


RoundOutcome = Literal[
    "accepted",
    "rejected",
    "no_failures",
    "no_spec",
    "no_change",
    "guard_rejected",
    "broken_candidate",
    "no_new_evidence",
    "inconclusive",
]


def _no_flips() -> dict[str, list[str]]:
    """A round's empty `flips`: no task went from solved to failed or back."""
    return {"solved_to_failed": [], "failed_to_solved": []}


class RoundResult(_Model):
    """One round of evolution as written to `evolution.json` (docs/evolution.md)."""

    round: int
    strategy: str
    score_before: float
    score_after: float | None = None
    accepted: bool = False
    editor_calls: int = 0
    tokens: dict[str, int] = Field(default_factory=lambda: {"prompt": 0, "completion": 0, "total": 0})
    wall_s: float = 0.0
    flips: dict[str, list[str]] = Field(default_factory=_no_flips)
    outcome: RoundOutcome
    reason: str = ""
    harness_id_before: str = ""
    harness_id_after: str | None = None
    spec_summary: str | None = None


class Tokens(TypedDict):
    """Token counts of a stage, a round or a run."""

    prompt: int
    completion: int
    total: int


class Flips(TypedDict):
    """Tasks whose solved state changed between two runs."""

    solved_to_failed: list[str]
    failed_to_solved: list[str]


class HarnessPoint(TypedDict, total=False):
    """A harness the loop scored: `evolution.json` `start` and `incumbent` (and `decision.json` `incumbent`)."""

    commit: str  #: its git commit
    harness_id: str  #: `<name>@<digest>`
    score: float | None  #: its suite score
    pass_hat_k: dict[str, float] | None  #: pass^k keyed `"1"`..`"k"`
    run_path: str  #: the run directory that scored it
    round: int  #: the round that made it the incumbent (0: the start)
    step: int  #: instance-level rounds: the step that made it


class RoundRecord(TypedDict, total=False):
    """One entry of `evolution.json` `rounds` (also `decision.json` `round`); keys in the order written."""

    round: int
    strategy: str
    score_before: float | None
    score_after: float | None  #: None when there was no candidate
    accepted: bool
    editor_calls: int
    tokens: Tokens
    wall_s: float
    flips: Flips
    outcome: str | None  #: `RoundOutcome` once the round ended
    reason: str
    harness_id_before: str
    harness_id_after: str | None
    spec_summary: str | None
    diagnosis_input: str | None  #: the digest of what the diagnosis read (`evolve.repeat`)
    pass_hat_k_before: dict[str, float] | None
    pass_hat_k_after: dict[str, float] | None
    commit: str  #: the accepted commit
    decision: dict[str, Any]  #: the acceptance rule's fields (`gate.acceptance.Decision.fields`)
    reused_validation: str  #: the earlier validation this candidate's bytes reused
    model_overridden: int  #: trials of its validation in which the candidate asked for another model
    steps: list[dict[str, Any]]  #: instance-level rounds: one entry per spec patched
    proposals: list[dict[str, Any]]  #: alternatives rounds: one entry per proposal
    cost: dict[str, Any]  #: tokens and USD per role (`evolve.cost`)
    incumbent_run: dict[str, Any]  #: the incumbent's run the candidate was compared with (`evolve.paired`)
    confirmation: dict[str, Any] | None  #: `--ecdysis-accept sequential`: its looks (`evolve.confirm`)
    looks: dict[str, Any]  #: `--ecdysis-accept adaptive`: its budget, looks and retry mark (`evolve.looks`)
    extra_trials: dict[str, Any]  #: `--ecdysis-accept-extra-trials` (`evolve.extra_trials`)
    ablation: dict[str, Any]  #: `--ecdysis-ablate`: changes, kept, dropped (`evolve.ablation`)
    candidate_score: float | None  #: the candidate's score before its ablation
    chosen: int  #: alternatives rounds: the proposal kept
    heldout: dict[str, Any]  #: the held-out check of a train-accepted candidate (`evolve.heldout`)


class DecisionRecord(TypedDict, total=False):
    """`rounds/<n>/decision.json`: the rule's fields (`gate.acceptance.decision_fields`; null when no candidate
    was validated), then the round and the incumbent after it."""

    rule: str | None
    method: str | None
    effect: float | None
    interval: list[float] | None
    p_value: float | None
    level: float | None
    n_tasks: int | None
    wins: int | None
    losses: int | None
    sequential: dict[str, Any]  #: under `sequential`: `lr`, `looks`, `pairs`, `state`
    round: RoundRecord
    incumbent: HarnessPoint


class EvolutionRecord(TypedDict, total=False):
    """`evolution.json`, the run's record and checkpoint; keys in the order a new run writes them."""

    schema_version: int
    run_id: str
    suite: str | None
    split: str
    tasks: list[str] | None
    threshold: float
    trials: int
    strategy: str
    editor: str
    model: str
    harness: str
    self_evolution_cap: int
    proposals: int
    accept: dict[str, Any]  #: `{"rule", "method", "level"}`
    rescore: str
    evidence: str
    accept_extra_trials: int
    accept_budget: int  #: ini `ecdysis_accept_budget` (0: the default budget)
    adaptive: dict[
        str, Any
    ]  #: the adaptive rule's decision budget and projection (`evolve.looks.plan_budget`)
    ablate: bool
    status: str  #: `running`, `finished`, `stopped_budget`
    start: HarnessPoint
    incumbent: HarnessPoint
    rounds: list[RoundRecord]
    branch: str | None
    test: dict[str, Any] | None  #: `{"start", "frozen", "trials", "transfer", ...}`
    wall_s: float
    run_path: str
    cpu_s: float
    wall_s_before: float  #: resumed: the wall-clock of the sessions before
    cpu_s_before: float
    rescored_on_resume: list[dict[str, Any]]
    projection: dict[str, Any]  #: `evolve.budget.project`
    budget_stop: dict[str, Any]
    cost: dict[str, Any]
    cost_start_runs: list[dict[str, Any]]
    diff_command: str
    validations: dict[str, Any]
    heldout_runs: dict[str, Any]  #: harness id -> its held-out (test split) run (`evolve.heldout`)
    heldout_checks: dict[str, Any]  #: "<incumbent id>><candidate id>" -> its held-out check
    validity: dict[str, Any]
