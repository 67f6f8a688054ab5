"""The simulated model's τ² knowledge, one provider per suite, for the `ecdysis_sim_knowledge` hook
(`registration.ecdysis_sim_knowledge`): airline and retail (`sim_knowledge.Tau2Knowledge`), telecom
(`telecom_knowledge.TelecomKnowledge`). Above both, so neither imports the other back."""

from __future__ import annotations

import functools

from ..tasks.suite import SUITE_NAMES
from .sim_knowledge import Tau2Knowledge
from .telecom_knowledge import TelecomKnowledge


@functools.lru_cache(maxsize=1)
def providers() -> dict[str, Tau2Knowledge]:
    """`{"tau2-airline": ..., "tau2-retail": ..., "tau2-telecom": ...}` for the `ecdysis_sim_knowledge`
    hook."""
    return {
        **{SUITE_NAMES[d]: Tau2Knowledge(d) for d in ("airline", "retail")},
        SUITE_NAMES["telecom"]: TelecomKnowledge("telecom"),
    }
