"""Routes a fresh attacker found with a `cmd:` editor after the trust issue landed (kinds, not cases):

- an editor that rewrote an installed dependency of τ² (pydantic) so that τ²'s evaluator returned 1.0 only
  for its candidate: the protected trees now include every installed file, by size and times
  (`integrity.stat_digests`), so the change stops the evolution at the editor's integrity check;
- an editor that wrote a secret of its environment into the harness source: the guard refuses a candidate
  whose changed files carry a known secret, as it is or encoded (`core.secrets.secrets_in`), so it is never
  committed or shown in a pull request (end to end: `test_contained.test_a_canary_key_appears_in_no_written_file`).
"""

from __future__ import annotations

import base64
import os

from pytest_ecdysis.core.secrets import secrets_in
from pytest_ecdysis.validate import integrity

KEY = "sk-canary-0123456789abcdef"


def test_a_rewritten_installed_file_shows_even_with_its_size_and_mtime_restored(tmp_path):
    site = tmp_path / "site-packages"
    (site / "pydantic").mkdir(parents=True)
    target = site / "pydantic" / "__init__.py"
    target.write_text("VERSION = '2'\n")
    (site / "pydantic" / "__pycache__").mkdir()
    (site / "pydantic" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"cache")
    before = integrity.stat_digests(site)
    assert list(before) == ["pydantic/__init__.py"]  # bytecode caches are the bytecode check's business
    st = target.stat()
    target.write_text("VERSION = '3'\n")  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # modification time put back
    after = integrity.stat_digests(site)
    assert integrity.changes({"installed packages": before}, {"installed packages": after}) == [
        "installed packages: pydantic/__init__.py changed"
    ]


def test_the_protected_trees_include_every_installed_package():
    roots = integrity.protected_roots(None)
    stat_roots = [name for name, (_, files) in roots.items() if files == integrity.STAT]
    assert stat_roots and all(name.startswith("installed packages in ") for name in stat_roots)


def test_a_candidate_carrying_a_secret_is_found_in_any_plain_encoding():
    env = {"CANARY_API_KEY": KEY, "HOME": "/root", "SHORT_TOKEN": "abc"}
    forms = {
        "plain.py": f'NOTE = "{KEY}"\n'.encode(),
        "reversed.py": f'NOTE = "{KEY[::-1]}"[::-1]\n'.encode(),
        "b64.py": b"NOTE = '" + base64.b64encode(KEY.encode()) + b"'\n",
        "hex.py": f"NOTE = bytes.fromhex('{KEY.encode().hex()}')\n".encode(),
    }
    found = secrets_in({**forms, "clean.py": b"print('hello')\n", "link": None}, env)
    assert found == [f"{name}: the value of CANARY_API_KEY" for name in sorted(forms)]
    assert secrets_in({"x.py": b"abc"}, env) == []  # values under 8 characters are no secret
