"""The near-miss benchmark harness is built from the example at run time (`benchmarks/near_miss_harness.py`):
the example's files as they are, `grounding.py` beside them and the check wrapped around the example's
`_emit_calls`; a slipped id is rewritten to the one value the conversation holds, with a note."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from test_sim_repairs import slip_only_trials

from pytest_ecdysis.core.harness import load_harness

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "pytest_ecdysis_tau2" / "example_harness"
ADDITION = ROOT / "benchmarks" / "harnesses" / "near_miss"


def _bench_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def builder():
    return _bench_module("near_miss_harness", ROOT / "benchmarks" / "near_miss_harness.py")


@pytest.fixture(scope="module")
def grounding():
    return _bench_module("near_miss_grounding", ADDITION / "grounding.py")


def test_the_built_harness_is_the_example_plus_the_check(tmp_path: Path, builder) -> None:
    """Every file of the example but `agent.py` byte for byte, no recipes, `agent.py` the example's with the
    addon after it, `grounding.py` added; it loads as a harness and its agent's `_emit_calls` is the check."""
    built = builder.build(tmp_path)
    assert built == tmp_path / "near_miss_harness"
    example_files = {
        p.relative_to(EXAMPLE)
        for p in EXAMPLE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and "recipes" not in p.parts
    }
    built_files = {
        p.relative_to(built) for p in built.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }
    assert built_files == example_files | {Path("grounding.py")}
    for rel in example_files - {Path("agent.py")}:
        assert (built / rel).read_bytes() == (EXAMPLE / rel).read_bytes(), rel
    agent = (built / "agent.py").read_text()
    example_agent = (EXAMPLE / "agent.py").read_text()
    assert agent.startswith(example_agent) and agent.endswith((ADDITION / "agent_addon.py").read_text())
    module = load_harness(built)
    assert callable(module.build_agent)
    agent_module = importlib.import_module(module.__name__ + ".agent")
    assert agent_module.HarnessAgent._emit_calls.__name__ == "_emit_grounded_calls"


def test_a_harness_the_check_cannot_wrap_is_refused(tmp_path: Path, builder) -> None:
    """A harness without the example's `_emit_calls` gets one error naming the shape it needs."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "agent.py").write_text("def build_agent(**kw):\n    return None\n")
    with pytest.raises(ValueError, match="example_harness"):
        builder.build(tmp_path / "out", base=other)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "value, words, held",
    [
        ("ZFA04X", {"ZFA04Y", "HATHAT"}, "ZFA04Y"),  # one substitution
        ("ZFA04", {"ZFA04Y"}, "ZFA04Y"),  # one deletion
        ("zfa04y", {"ZFA04Y"}, "ZFA04Y"),  # case only
        ("ZFA04Y", {"ZFA04Y", "ZFA04X"}, None),  # held as is
        ("ZFA04Z", {"ZFA04Y", "ZFA04X"}, None),  # two candidates: ambiguous
        ("ZFB14X", {"ZFA04Y"}, None),  # three edits away
        ("economy", {"econom1"}, None),  # not id-like (no digit)
    ],
)
def test_a_near_miss_is_one_edit_from_exactly_one_held_value(grounding, value, words, held) -> None:
    """`nearest`: the held value a sent one is a near miss of, or None."""
    assert grounding.nearest(value, words) == held


def test_ground_rewrites_nested_values_and_records_each(grounding) -> None:
    """`ground`: every near miss in nested arguments rewritten, each recorded as (sent, held), the rest kept."""
    words = grounding.vocabulary(
        [
            {"role": "user", "content": "my reservation is ZFA04Y, user mia_li_3668"},
            {"role": "assistant", "content": "AAAA11 is mine"},  # the model's own words hold nothing
        ]
    )
    assert words == {"ZFA04Y", "mia_li_3668"}
    repairs: list[tuple[str, str]] = []
    args = {"reservation_id": "ZFA04X", "passengers": [{"id": "mia_li_3667"}], "n": 2, "cabin": "AAAA12"}
    assert grounding.ground(args, words, repairs) == {
        "reservation_id": "ZFA04Y",
        "passengers": [{"id": "mia_li_3668"}],
        "n": 2,
        "cabin": "AAAA12",
    }
    assert repairs == [("ZFA04X", "ZFA04Y"), ("mia_li_3667", "mia_li_3668")]


@pytest.mark.slow
def test_the_check_cures_copy_slips_on_a_real_trial(tmp_path: Path, monkeypatch, builder) -> None:
    """Airline task 7 under a profile that only slips: the example fails on a slip; the built harness sends
    the held ids instead, passes, and notes each rewrite as `near_miss_repair`."""
    pytest.importorskip("tau2")
    (plain, plain_truth), (fixed, fixed_truth) = slip_only_trials(
        tmp_path, monkeypatch, EXAMPLE, builder.build(tmp_path)
    )
    assert plain.reward == 0.0 and plain_truth["cause"]["kind"] == "slip"
    assert fixed.reward == 1.0 and fixed_truth["cause"] is None
    repairs = [n for n in fixed.harness_notes if n["kind"] == "near_miss_repair"]
    assert repairs and all("is not in the conversation; sent" in n["detail"] for n in repairs)
