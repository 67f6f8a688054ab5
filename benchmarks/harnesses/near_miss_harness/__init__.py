"""The example harness plus a generic near-miss check before each call (`grounding.py`): a benchmark
harness for `benchmarks/sim_trials.py`, not a shipped one (the example is `pytest_ecdysis_tau2/example_harness`).

Layers, one file each (docs/internals.md): `config.py` settings, `prompts.py` policy prompt, `tools.py`
tool interface, `feedback.py` environment contract, `context.py` and `closing.py` trajectory regulation,
`agent.py` the loop. Evolution edits these files, never the model, the tasks or the evaluator.
"""

from __future__ import annotations

from typing import Any


def build_agent(
    *,
    tools: list,
    domain_policy: str,
    client: Any,
    model: str,
    max_steps_hint: int | None = None,
    **options: Any,
) -> Any:
    """A τ² agent (`tau2.agent.base.BaseAgent`) over `client` (an `openai.OpenAI`) and `model`.

    The agent exposes `harness_notes` (recorded decisions) and `usage` (prompt/completion/total tokens).
    """
    from .agent import HarnessAgent

    return HarnessAgent(
        tools=tools, domain_policy=domain_policy, client=client, model=model, max_steps_hint=max_steps_hint
    )
