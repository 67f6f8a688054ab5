"""litellm imported only when τ² really calls a model through it: a stand-in during τ²'s own import.

`import tau2.evaluator.evaluator` (and the orchestrator, the user simulator) imports `tau2.utils.llm_utils`,
which imports litellm at module level for τ²'s own LLM agent, user simulator and NL-assertion judge. The
suites use none of them (their agent is the harness's, their user simulator `user.py`, their reward
`EvaluationType.ALL`, which calls no judge), yet litellm was most of the cost of every τ² import: measured
here, `load_tau2()` in a fresh interpreter took 3.5-4.2 s of CPU and 250 MB resident with it against
0.5-0.6 s and 89 MB with this stand-in (docs/benchmarks.md, "Where a round's time goes"), paid by every
worker, fork server and scorer of every suite run. A process that forks trial processes must import what
they need that litellm used to bring along (`agent_child` imports openai before forking).

`installed()` puts stand-in modules for exactly the names `tau2.utils.llm_utils` takes at import
(`litellm`, `litellm.caching.caching.Cache`, `litellm.main.ModelResponse`/`Usage`) into `sys.modules`
while τ² imports, and removes them after: a later `import litellm` anywhere gets the real library. What
`llm_utils` kept is a proxy: its settings (`drop_params`, `suppress_debug_info`, ...) and calls
(`disable_cache()`) are recorded and replayed on the real module, which any other attribute, call or
`Cache(...)` imports on first use. `ModelResponse` and `Usage` are placeholders (τ² 26.3 uses them in
annotations only). A τ² that takes anything else from litellm at import raises ImportError inside the
context; `tau2lib.load_tau2` then imports τ² again the ordinary way (slower, same behaviour).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

_LOCK = threading.RLock()
NAMES = ("litellm", "litellm.caching", "litellm.caching.caching", "litellm.main")


class _Proxy(types.ModuleType):
    """The `litellm` module `tau2.utils.llm_utils` holds: settings and calls recorded until the real one loads."""

    def __init__(self) -> None:
        super().__init__(
            "litellm", "stand-in for litellm until τ² calls a model through it (deferred_litellm)"
        )
        object.__setattr__(self, "_settings", {})
        object.__setattr__(self, "_calls", [])
        object.__setattr__(self, "_real", None)
        object.__setattr__(self, "__path__", [])

    def __setattr__(self, name: str, value: Any) -> None:
        self._settings[name] = value
        if self._real is not None:
            setattr(self._real, name, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.load(), name)

    def load(self) -> types.ModuleType:
        """The real litellm, imported now if needed, with the recorded settings and calls applied."""
        with _LOCK:
            if self._real is None:
                for name in NAMES:  # never serve the stand-ins to the real import
                    if isinstance(sys.modules.get(name), _Proxy | _Part):
                        del sys.modules[name]
                real = importlib.import_module("litellm")
                for key, value in self._settings.items():
                    setattr(real, key, value)
                for name, args, kwargs in self._calls:
                    getattr(real, name)(*args, **kwargs)
                object.__setattr__(self, "_real", real)
            return self._real

    def _recorded(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self._real is not None:
                return getattr(self._real, name)(*args, **kwargs)
            self._calls.append((name, args, kwargs))
            return None

        return call

    def _deferred(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(self.load(), name)(*args, **kwargs)

        call.__name__ = name
        return call


class _Part(types.ModuleType):
    """A stand-in submodule of `litellm` (only for `from litellm.x import y` during τ²'s import)."""

    # the names τ²'s imports take from the parts, each set on the part that has it (`_stand_ins`)
    Cache: Any
    ModelResponse: Any
    Usage: Any


def _stand_ins() -> dict[str, types.ModuleType]:
    proxy = _Proxy()
    for name in ("disable_cache", "enable_cache"):
        object.__setattr__(proxy, name, proxy._recorded(name))
    for name in ("completion", "completion_cost"):
        object.__setattr__(proxy, name, proxy._deferred(name))
    caching, cache_module, main = (
        _Part("litellm.caching"),
        _Part("litellm.caching.caching"),
        _Part("litellm.main"),
    )
    caching.__path__ = []

    def cache(*args: Any, **kwargs: Any) -> Any:  # only built when τ²'s LLM cache is on
        proxy.load()
        return importlib.import_module("litellm.caching.caching").Cache(*args, **kwargs)

    cache_module.Cache = cache
    main.ModelResponse = type("ModelResponse", (), {"__doc__": "placeholder: τ² uses it in annotations only"})
    main.Usage = type("Usage", (), {"__doc__": "placeholder: τ² uses it in annotations only"})
    return {
        "litellm": proxy,
        "litellm.caching": caching,
        "litellm.caching.caching": cache_module,
        "litellm.main": main,
    }


@contextlib.contextmanager
def installed() -> Iterator[bool]:
    """Stand-ins in `sys.modules` for the duration (True), or nothing when litellm is already imported
    (False: the real one is used)."""
    with _LOCK:
        if "litellm" in sys.modules:
            yield False
            return
        parts = _stand_ins()
        sys.modules.update(parts)
        try:
            yield True
        finally:
            for name, module in parts.items():
                if sys.modules.get(name) is module:
                    del sys.modules[name]


def is_deferred() -> bool:
    """True while the real litellm has not been imported in this process."""
    return "litellm" not in sys.modules
