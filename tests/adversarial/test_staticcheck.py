"""The static check reads code, not literal strings: each obfuscation route of a harness that reaches the reward is flagged, the
example harness and every sim-editor recipe applied to it are clean, and what the base already did is not
counted again."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_ecdysis.core.harness import harness_files
from pytest_ecdysis.sim.editor.recipes import apply_spec
from pytest_ecdysis.validate.static import check_candidate, check_file

EXAMPLE = Path(__file__).resolve().parents[2] / "pytest_ecdysis_tau2" / "example_harness"

ROUTES = {
    "gold path by concatenation": ("p = 'ta' + 'sks' + '.json'\nopen(p)\n", "file_access"),
    "base64-decoded path": ("import base64\np = base64.b64decode('dGFza3MuanNvbg==')\n", "dynamic_code"),
    "getattr from pieces": ("import os\nv = getattr(os, 'env' + 'iron')\n", "patches_code"),
    "importlib with a split name": (
        "import importlib\nm = importlib.import_module('ta' + 'u2.evaluator')\n",
        "dynamic_code",
    ),
    "dunder import": ("m = __import__('o' + 's')\n", "dynamic_code"),
    "tau2.__file__": ("import tau2.agent.base as b\nimport tau2\nd = tau2.__file__\n", "introspection"),
    "simulated ground truth": ("URL = '/ecdysis/ground_truth'\n", "gold_data"),
    "scorer patched": (
        "from pytest_ecdysis_tau2.scoring.scorer_client import ScorerClient\n"
        "ScorerClient.score = lambda *a: 1\n",
        "internals",
    ),
    "knowledge module named": ("M = 'telecom_knowledge'\n", "gold_data"),
    "module attribute assigned": ("import json\njson.loads = lambda s: {}\n", "patches_code"),
    "sys.modules": ("import sys\nm = sys.modules['pytest_ecdysis_tau2.scoring.scorer']\n", "introspection"),
    "gc walk": ("import gc\nobjs = gc.get_objects()\n", "introspection"),
    "environment read": ("import os\nk = os.environ.get('OPENAI_API_KEY')\n", "environment"),
    "subprocess": ("import subprocess\nsubprocess.Popen(['sh'])\n", "process"),
    "network": ("import urllib.request\nurllib.request.urlopen('http://x')\n", "network"),
    "pathlib write outside": ("from pathlib import Path\nPath('/tmp/x').write_text('1')\n", "file_access"),
    "climbing out of the harness": (
        "from pathlib import Path\nt = (Path(__file__).parent.parent / 'x').read_text()\n",
        "file_access",
    ),
    "exec of decoded code": ("exec(bytes.fromhex('7072696e742829').decode())\n", "dynamic_code"),
    "subclass walk": ("s = object.__subclasses__()\n", "introspection"),
}


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_each_route_is_flagged(name: str) -> None:
    """Every obfuscation route of the issue yields a finding of its kind."""
    source, rule = ROUTES[name]
    findings = check_candidate({"__init__.py": source.encode()}, {})
    assert rule in {f.rule for f in findings}, (name, [str(f) for f in findings])


@pytest.mark.parametrize("name", ["sitecustomize.py", "x.pth", "conftest.py", "native.so"])
def test_files_a_harness_must_not_ship(name: str) -> None:
    """Startup hooks, conftest files and binaries are refused whatever they contain."""
    assert [f.rule for f in check_file(name, b"x = 1\n")] == ["file_kind"]


def test_symlink_and_unparsable_file() -> None:
    """A symlink (recorded as None by the snapshot) and a file that does not parse are findings."""
    assert check_file("link.py", None)[0].rule == "file_kind"
    assert check_file("bad.py", b"def (:\n")[0].rule == "file_kind"


def test_own_files_and_plain_code_are_clean() -> None:
    """Reading the harness's own files, constant getattr on objects and ordinary code are not flagged."""
    source = (
        b"import json\nfrom pathlib import Path\nimport os\n"
        b"DATA = json.loads((Path(__file__).parent / 'rules.json').read_text())\n"
        b"TEXT = open(os.path.join(os.path.dirname(__file__), 'p.txt')).read()\n"
        b"def f(resp):\n    return getattr(resp, 'usage', None)\n"
    )
    assert check_candidate({"__init__.py": source}, {}) == []


def test_only_added_findings_count() -> None:
    """A construct the base harness already had is not reported again; a second copy of it is."""
    base = {"__init__.py": b"import os\nA = os.environ.get('A')\n"}
    same = {"__init__.py": b"import os\nA = os.environ.get('A')\nB = 1\n"}
    more = {"__init__.py": b"import os\nA = os.environ.get('A')\nB = os.environ.get('B')\n"}
    assert check_candidate(same, base) == []
    assert [f.rule for f in check_candidate(more, base)] == ["environment"]


def _files(directory: Path) -> dict[str, bytes]:
    return {p.as_posix(): (directory / p).read_bytes() for p in harness_files(directory)}


KNOBS = [
    {"knob": "max_model_calls", "value": 32},
    {"knob": "keep_last_messages", "value": 64},
    {"knob": "max_tool_result_chars", "value": 5000},
    {"knob": "error_feedback"},
    {"knob": "id_normalisation", "rules": ["order_id:#prefix", "reservation_id:upper"]},
    {"knob": "completion_check"},
    {"knob": "repeat_guard"},
    {"knob": "policy_rule", "text": "Confirm the reservation id before any change."},
]


def test_example_harness_and_every_recipe_pass(tmp_path: Path) -> None:
    """The example harness has no finding, and no sim-editor recipe adds one (evolution with the
    simulated model is never refused by the check it must pass)."""
    base = _files(EXAMPLE)
    assert check_candidate(base, {}) == []
    for knob in KNOBS:
        harness = tmp_path / knob["knob"] / "example_harness"
        shutil.copytree(EXAMPLE, harness, ignore=shutil.ignore_patterns("__pycache__"))
        result = apply_spec(
            {
                "changes": [
                    {"component": "policy_prompt", "files": [], "description": "x", "parameters": knob}
                ]
            },
            harness,
        )
        assert result.applied == [knob["knob"]]
        assert [str(f) for f in check_candidate(_files(harness), base)] == [], knob
