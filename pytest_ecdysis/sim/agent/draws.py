"""The simulated agent's draws: whether a quirk fires at a site of a trial, and what the draws recorded.

`QuirkDraws` is the part of `sim.agent.trial.AgentTrial` that draws (`fires`: a pure function of profile, task,
trial, site and, for a share `noise` of the sites, the run nonce; `_blind_spot`, `_draw_forget`), records
ground-truth entries (`_quirk`, `_bent`, `_cure`) and reports them at trial end (`ground_truth`, with each
damaging entry's `effect` and the trial's cause from `sim/truth/causes.py`). It holds no state of its own: the
attributes it reads (`profile`, `task`, `trial`, `nonce`, `off`, `quirks`, `step`, `bent_by`, `effects`,
`verbose_quirk`, `closed`) are set by `AgentTrial.__init__`. This module must not import tau2.
"""

from __future__ import annotations

from typing import Any

from pytest_ecdysis.sim.knowledge import id_like, leaves
from pytest_ecdysis.sim.profiles import GROUND_TRUTH_ORIGINS, choose, uniform
from pytest_ecdysis.sim.truth.causes import LATE_EFFECTS, trial_cause


class QuirkDraws:
    """The draws and the ground truth of one trial (a part of `AgentTrial`; module docstring)."""

    def _u(self, *where: Any) -> float:
        """The draw at `where`: under a nonce, with probability `noise` (decided per site *and* nonce) a
        fresh draw of that nonce, else the run-independent draw of (profile, task, trial, site).

        Choosing the redrawn sites per nonce (not once per site) is what lets every draw site, and so
        whether any quirk fires on a trial, change between two runs: a site fixed for all nonces would
        give the same outcome on every rerun. The marginal rate of each quirk is unchanged (both draws
        are uniform); two nonces share a site's draw with probability (1 - noise)^2.
        """
        base = (self.profile.seed, self.task.suite, self.task.task_id, self.trial)
        if self.nonce and self.profile.noise > 0 and uniform(*base, "noisy", self.nonce, *where) < self.profile.noise:
            return uniform(*base, "nonce", self.nonce, *where)
        return uniform(*base, *where)

    def fires(self, kind: str, *where: Any, factor: float = 1.0) -> bool:
        """Whether quirk `kind` fires at draw site `where` of this trial (its rate scaled by the task's
        difficulty and `factor`); a pure function of profile, task, trial, site and nonce."""
        if kind in self.off:
            return False
        rate = self.profile.scaled(kind, self.task.suite, self.task.task_id) * factor
        if not (rate > 0 and self._u(kind, *where) < rate):
            return False
        if self._complies(kind, *where):  # a rule of the prompt addresses it and the model follows it here
            rule = self._rule_for(kind)
            self._quirk(kind, cured=True, by="instruction", rule=rule.text if rule is not None else "")
            return False
        return True

    def _draw_trial(self, kind: str, applicable: bool) -> bool:
        return applicable and self.fires(kind, "trial")

    def _blind_spot(self) -> tuple[int, str] | None:
        """(write plan index, argument path) of this task's blind spot, if it has one this trial.

        Drawn per task (not per trial) among the id-like values of its writes, so that a rule naming
        that very value is the only cure; then it fires per trial with the profile's rate.
        """
        p = self.profile
        if p.blind_spot_task_rate <= 0:
            return None
        if uniform(p.seed, self.task.suite, self.task.task_id, "blind_spot_task") >= p.blind_spot_task_rate:
            return None
        candidates = [(i, path) for i in self.task.writes
                      for path, value in leaves(self.task.plan[i].arguments) if id_like(value)]
        if not candidates:
            return None
        spot = candidates[choose(len(candidates), p.seed, self.task.suite, self.task.task_id, "blind_spot")]
        return spot if self.fires("blind_spot", "trial") else None

    def _quirk(self, kind: str, cured: bool = False, **detail: Any) -> int:
        self.quirks.append({"kind": kind, "origin": GROUND_TRUTH_ORIGINS[kind], "step": self.step, "cured": cured,
                            **detail})
        return len(self.quirks) - 1

    def _bent(self, index: int, entry: int, path: str | None = None) -> None:
        """Entry `entry` put a wrong value into the arguments of plan step `index` (at `path`)."""
        self.bent_by.setdefault(index, entry)
        if path is not None:
            self.wrong_at.setdefault((index, path), entry)
        if self.task.plan[index].write:
            self.effects.setdefault(entry, "wrong_write")

    def _cure(self, index: int | None) -> None:
        if index is not None:
            self.quirks[index]["cured"] = True

    def _draw_forget(self) -> bool:
        return bool(self.task.communicate_info) and self.fires("forget_communicate", "trial")

    def ground_truth(self) -> dict[str, Any]:
        """The entries drawn so far, with `cured` settled for trial-level quirks, each damaging entry's
        `effect`, and the trial's `cause` (`sim/truth/causes.py`; read at trial end)."""
        quirks = [dict(q) for q in self.quirks]
        if self.verbose_quirk is not None:
            # the harness let the model run to a closing of its own: the budget allowed the extra calls
            quirks[self.verbose_quirk]["cured"] = self.closed
        for i, q in enumerate(quirks):
            effect = self.effects.get(i) or (None if q["cured"] else LATE_EFFECTS.get(q["kind"]))
            if q["kind"] in ("id_case", "id_prefix") and not q["cured"] and effect is None:
                step = next((s for s in self.task.plan if s.name == q.get("tool")), None)
                effect = "wrong_write" if step is not None and step.write else None
            if effect and not q["cured"]:
                q["effect"] = effect
        cause, causes = trial_cause(quirks, closed=self.closed)
        return {"task_id": self.task.task_id, "trial": self.trial, "suite": self.task.suite,
                "profile": self.profile.name, "nonce": self.nonce, "agent_requests": self.step,
                "reached_final": self.reached_final,
                "closed": self.closed, "quirks": quirks, "cause": cause, "causes": causes}
