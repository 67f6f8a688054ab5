"""The simulated agent's draws: whether a quirk fires at a site of a trial, and what the draws recorded.

`QuirkDraws` is the part of `sim.agent.trial.AgentTrial` that draws (`fires`: a pure function of profile,
task, trial, site and, for a share `noise` of the sites, the run nonce; `blind_spot`, `draw_forget`),
decides whether a rule of the prompt that addresses the quirk is followed at the site (`complies`: the quirk
is then recorded `cured` with `by: instruction`), records ground-truth entries (`quirk`, `bent`, `cure`) and
reports them at trial end (`ground_truth`, with each damaging entry's `effect` and the trial's cause from
`sim/truth/causes.py`). It reads and writes the trial's `state.AgentState` and holds nothing else. This
module must not import tau2.
"""

from __future__ import annotations

from typing import Any

from pytest_ecdysis.sim.agent.instructions import Rule
from pytest_ecdysis.sim.agent.state import AgentState
from pytest_ecdysis.sim.knowledge import id_like, leaves
from pytest_ecdysis.sim.profiles import GROUND_TRUTH_ORIGINS, choose, uniform
from pytest_ecdysis.sim.truth.causes import LATE_EFFECTS, trial_cause


class QuirkDraws:
    """The draws and the ground truth of one trial (module docstring)."""

    def __init__(self, state: AgentState) -> None:
        self.state = state

    def draw(self, *where: Any) -> float:
        """The draw at `where`: under a nonce, with probability `noise` (decided per site *and* nonce) a
        fresh draw of that nonce, else the run-independent draw of (profile, task, trial, site).

        Choosing the redrawn sites per nonce (not once per site) is what lets every draw site, and so
        whether any quirk fires on a trial, change between two runs: a site fixed for all nonces would
        give the same outcome on every rerun. The marginal rate of each quirk is unchanged (both draws
        are uniform); two nonces share a site's draw with probability (1 - noise)^2.
        """
        s = self.state
        base = (s.profile.seed, s.task.suite, s.task.task_id, s.trial)
        if s.nonce and s.profile.noise > 0 and uniform(*base, "noisy", s.nonce, *where) < s.profile.noise:
            return uniform(*base, "nonce", s.nonce, *where)
        return uniform(*base, *where)

    def fires(self, kind: str, *where: Any, factor: float = 1.0) -> bool:
        """Whether quirk `kind` fires at draw site `where` of this trial (its rate scaled by the task's
        difficulty and `factor`); a pure function of profile, task, trial, site and nonce."""
        s = self.state
        if kind in s.off:
            return False
        rate = s.profile.scaled(kind, s.task.suite, s.task.task_id) * factor
        if not (rate > 0 and self.draw(kind, *where) < rate):
            return False
        if self.complies(kind, *where):  # a rule of the prompt addresses it and the model follows it here
            rule = self.rule_for(kind)
            self.quirk(kind, cured=True, by="instruction", rule=rule.text if rule is not None else "")
            return False
        return True

    def rule_for(self, kind: str) -> Rule | None:
        return next((r for r in self.state.rules if kind in r.kinds), None)

    def complies(self, kind: str, *where: Any) -> bool:
        """Whether a rule of the prompt addresses quirk `kind` and the model follows it at this site (with
        the profile's `instruction_compliance`; a pure function of the site and nonce, like every draw)."""
        if kind not in self.state.addressed:
            return False
        return self.draw("comply", kind, *where) < self.state.profile.instruction_compliance

    def draw_trial(self, kind: str, applicable: bool) -> bool:
        return applicable and self.fires(kind, "trial")

    def blind_spot(self) -> tuple[int, str] | None:
        """(write plan index, argument path) of this task's blind spot, if it has one this trial.

        Drawn per task (not per trial) among the id-like values of its writes, so that a rule naming
        that very value is the only cure; then it fires per trial with the profile's rate.
        """
        s = self.state
        p = s.profile
        if p.blind_spot_task_rate <= 0:
            return None
        if uniform(p.seed, s.task.suite, s.task.task_id, "blind_spot_task") >= p.blind_spot_task_rate:
            return None
        candidates = [
            (i, path)
            for i in s.task.writes
            for path, value in leaves(s.task.plan[i].arguments)
            if id_like(value)
        ]
        if not candidates:
            return None
        spot = candidates[choose(len(candidates), p.seed, s.task.suite, s.task.task_id, "blind_spot")]
        return spot if self.fires("blind_spot", "trial") else None

    def quirk(self, kind: str, cured: bool = False, **detail: Any) -> int:
        """Record a ground-truth entry at the current agent request; its index."""
        s = self.state
        s.quirks.append(
            {"kind": kind, "origin": GROUND_TRUTH_ORIGINS[kind], "step": s.step, "cured": cured, **detail}
        )
        return len(s.quirks) - 1

    def bent(self, index: int, entry: int, path: str | None = None) -> None:
        """Entry `entry` put a wrong value into the arguments of plan step `index` (at `path`)."""
        s = self.state
        s.bent_by.setdefault(index, entry)
        if path is not None:
            s.wrong_at.setdefault((index, path), entry)
        if s.task.plan[index].write:
            s.effects.setdefault(entry, "wrong_write")

    def cure(self, index: int | None) -> None:
        if index is not None:
            self.state.quirks[index]["cured"] = True

    def draw_forget(self) -> bool:
        return bool(self.state.task.communicate_info) and self.fires("forget_communicate", "trial")

    def ground_truth(self) -> dict[str, Any]:
        """The entries drawn so far, with `cured` settled for trial-level quirks, each damaging entry's
        `effect`, and the trial's `cause` (`sim/truth/causes.py`; read at trial end)."""
        s = self.state
        quirks = [dict(q) for q in s.quirks]
        if s.verbose_quirk is not None:
            # the harness let the model run to a closing of its own: the budget allowed the extra calls
            quirks[s.verbose_quirk]["cured"] = s.closed
        for i, q in enumerate(quirks):
            effect = s.effects.get(i) or (None if q["cured"] else LATE_EFFECTS.get(q["kind"]))
            if q["kind"] in ("id_case", "id_prefix") and not q["cured"] and effect is None:
                step = next((st for st in s.task.plan if st.name == q.get("tool")), None)
                effect = "wrong_write" if step is not None and step.write else None
            if effect and not q["cured"]:
                q["effect"] = effect
        cause, causes = trial_cause(quirks, closed=s.closed)
        return {
            "task_id": s.task.task_id,
            "trial": s.trial,
            "suite": s.task.suite,
            "profile": s.profile.name,
            "nonce": s.nonce,
            "agent_requests": s.step,
            "reached_final": s.reached_final,
            "closed": s.closed,
            "quirks": quirks,
            "cause": cause,
            "causes": causes,
        }
