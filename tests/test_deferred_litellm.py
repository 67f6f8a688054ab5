"""τ² imports without litellm, which loads only when τ² calls a model through it (`deferred_litellm`;
the saving is in docs/benchmarks.md). Each test runs in a fresh interpreter: this session has τ² imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_tau2_imports_without_litellm_and_its_settings_reach_the_real_one() -> None:
    """After `load_tau2()` no litellm module is loaded; τ²'s import-time settings (`drop_params`,
    `suppress_debug_info`, `disable_cache()`) are applied to the real litellm when τ² first uses it, and an
    `import litellm` elsewhere gets the real library, not the stand-in."""
    out = _run("""
        import sys
        from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2
        t = load_tau2()
        assert not [n for n in sys.modules if n == "litellm" or n.startswith("litellm.")], "litellm was imported"
        import tau2.utils.llm_utils as u
        real = u.litellm.load()
        import litellm
        assert litellm is real and type(litellm).__name__ == "module"
        assert real.drop_params is True and real.suppress_debug_info is True
        assert real.cache is None  # disable_cache() replayed
        assert u.litellm.drop_params is True and u.litellm.Router is real.Router  # the rest is the real one
        assert u.completion.__name__ == "completion"
        print("ok")
    """)
    assert out.strip() == "ok"


def test_a_tau2_needing_more_of_litellm_is_imported_the_ordinary_way() -> None:
    """A τ² module that takes a litellm submodule the stand-in lacks makes `load_tau2` import τ² again with
    the real litellm (slower, same names) instead of failing."""
    out = _run("""
        import sys, importlib.abc, importlib.machinery
        class Needy(importlib.abc.MetaPathFinder):  # τ²'s evaluator importing one more litellm submodule
            def find_spec(self, name, path, target=None):
                if name == "tau2.evaluator.evaluator_nl_assertions" and not getattr(self, "busy", False):
                    import litellm.types.utils  # absent from the stand-in: ImportError while it is installed
                return None
        sys.meta_path.insert(0, Needy())
        from pytest_ecdysis_tau2.tasks.tau2lib import load_tau2
        t = load_tau2()
        assert "litellm.utils" in sys.modules and t.evaluate_simulation is not None
        print("ok")
    """)
    assert out.strip() == "ok"
