"""The arguments the simulated agent sends for a planned call: each value read from the request, or wrong.

`IntentBuilder` is the part of `sim.agent.trial.AgentTrial` that builds a call's arguments (`intended`):
every value the model must read (a `Dependency`) is taken from the request, guessed wrong when the request
lacks it (`unseen_value`, origin `harness`, with `why` from `why_unseen`), or bent by a value-level quirk
when it is visible (`context_loss` when too far back and no harness message restates it, the domain
policy missing, `blind_spot` unless a harness message holds the value, `wrong_choice`, `slip`). The
reasoning errors (`blind_spot`, per task; `wrong_choice`, per trial and write) send a *valid but wrong*
value, a real alternative the request shows (`sim.agent.alternatives.alternatives`); a `slip` changes one
character, as a copy slip does. Each wrong value is
recorded at its argument path (`wrong_at` of the trial's `state.AgentState`), so a later message holding
the right value can correct it (`rules.RuleFollower.corrected`). It draws through `draws.QuirkDraws` and
asks `rules.RuleFollower.told` whether the harness stated a value. This module must not import tau2.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_ecdysis.sim.agent.alternatives import alternatives
from pytest_ecdysis.sim.agent.draws import QuirkDraws
from pytest_ecdysis.sim.agent.rules import RuleFollower
from pytest_ecdysis.sim.agent.state import AgentState
from pytest_ecdysis.sim.knowledge import USER_SOURCE, Dependency, is_error_text, leaves
from pytest_ecdysis.sim.profiles import choose
from pytest_ecdysis.sim.reading import (
    POLICY_COVERAGE,
    distance_from_end,
    policy_coverage,
    request_corpus,
    visible,
)
from pytest_ecdysis.sim.values import _get_path, _set_path, wrong_value


def why_unseen(state: AgentState, dep: Dependency) -> tuple[str, int | None]:
    """Why a value the model needs is not in the request: `dropped` (it was shown, or the user said
    it, and the harness no longer sends it), `cut` (the result the model saw lacks it: cut or
    reformatted by the harness) or `never_obtained` (its lookup failed or never came back), with the
    entry that bent that lookup's arguments when one did."""
    if dep.source_step == USER_SOURCE:
        return "dropped", None
    seen = state.seen.get(dep.source_step)
    if seen is None or is_error_text(seen):
        return "never_obtained", state.bent_by.get(dep.source_step)
    return ("dropped" if dep.value in seen else "cut"), None


class IntentBuilder:
    """The arguments of one trial's calls (module docstring)."""

    def __init__(self, state: AgentState, draws: QuirkDraws, follower: RuleFollower) -> None:
        self.state = state
        self.draws = draws
        self.follower = follower
        #: (write plan index, argument path) of this trial's blind spot, or None (drawn once, at the start)
        self.blind = draws.blind_spot()

    def intended(self, index: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The arguments the model sends for a planned call: each value it must read (a `Dependency`) taken
        from the request, or guessed wrong when the request lacks it; then bent by value-level quirks."""
        s, draws = self.state, self.draws
        if index in s.intended:
            return s.intended[index]
        step = s.task.plan[index]
        args = json.loads(json.dumps(step.arguments))
        corpus = request_corpus(messages)
        for dep in step.dependencies:
            if not visible(dep.value, corpus):
                why, because = why_unseen(s, dep)
                cause: dict[str, Any] = {} if because is None else {"because": because}
                entry = draws.quirk("unseen_value", tool=step.name, arg=dep.path, why=why, **cause)
                args = _set_path(
                    args, dep.path, wrong_value(_get_path(args, dep.path), f"unseen{index}{dep.path}")
                )
                draws.bent(index, entry, dep.path)
            elif (
                step.write
                and dep.source_step != USER_SOURCE
                and (far := distance_from_end(dep.value, corpus) or 0) > s.profile.recall_chars
                and not self.follower.told(dep.value, messages)
                and draws.fires("context_loss", index, dep.path)
            ):
                # visible, but too far back for this model to recall (and no harness message restates it)
                entry = draws.quirk("context_loss", tool=step.name, arg=dep.path, distance_chars=far)
                args = _set_path(args, dep.path, wrong_value(_get_path(args, dep.path), f"{index}{dep.path}"))
                draws.bent(index, entry, dep.path)
        if step.write and (coverage := policy_coverage(s.task.policy, messages)) < POLICY_COVERAGE:
            # the harness did not give the model the domain policy: what the policy decides (a cabin, a
            # payment, a refund) is guessed, so the write goes wrong; an id the request shows stays right
            deps = {d.path for d in step.dependencies}
            paths = [path for path, _ in leaves(step.arguments) if path not in deps] or [
                path for path, _ in leaves(step.arguments)
            ]
            if paths:
                path = paths[choose(len(paths), s.profile.seed, s.task.task_id, "policy", index)]
                entry = draws.quirk(
                    "unseen_value",
                    tool=step.name,
                    arg=path,
                    why="policy_missing",
                    policy_coverage=round(coverage, 3),
                )
                args = _set_path(args, path, wrong_value(_get_path(args, path), f"policy{index}{path}"))
                draws.bent(index, entry, path)
        if self.blind is not None and self.blind[0] == index:
            path = self.blind[1]
            gold = _get_path(step.arguments, path)
            # the task's reasoning error: a real alternative the model was shown (another reservation, a
            # flight that breaks the policy), the same one in every trial; none shown, no error to make
            options = alternatives(gold, path, messages)
            if options:
                # a harness message holds the right value: the one way to prevent it
                cured = self.follower.told(gold, messages)
                wrong = options[choose(len(options), s.profile.seed, s.task.task_id, "blind_value")]
                entry = draws.quirk(
                    "blind_spot", cured=cured, tool=step.name, arg=path, wrong="valid_alternative"
                )
                if not cured:
                    args = _set_path(args, path, wrong)
                    draws.bent(index, entry, path)
        if step.write and draws.fires("wrong_choice", index):
            # a reasoning error of this trial: one argument gets a real alternative the model was shown
            found = [
                (path, options)
                for path, value in leaves(step.arguments)
                if (index, path) not in s.wrong_at and (options := alternatives(value, path, messages))
            ]
            if found:
                pick = choose(len(found), s.profile.seed, s.task.task_id, s.trial, "wrong_choice", index)
                path, options = found[pick]
                wrong = options[choose(len(options), s.profile.seed, s.task.task_id, s.trial, "wc", path)]
                entry = draws.quirk("wrong_choice", tool=step.name, arg=path, wrong="valid_alternative")
                args = _set_path(args, path, wrong)
                draws.bent(index, entry, path)
        if draws.fires("slip", index) and args:
            paths = sorted(
                k for k, v in args.items() if isinstance(v, (str, int, list)) and v not in ("", [])
            )
            if paths:
                path = paths[choose(len(paths), s.profile.seed, s.task.task_id, s.trial, "slip", index)]
                entry = draws.quirk("slip", tool=step.name, arg=path)
                args[path] = wrong_value(args[path], f"slip{index}")
                draws.bent(index, entry, path)
        s.intended[index] = args
        return args
