"""One self-contained HTML page per run (`ecdysis report`, ini `ecdysis_html = FILE`).

    gather(run_path) -> dict       every file of a run directory read tolerantly into plain data
    render(run_path) -> str        that data through `templates/report.html.j2` (Jinja2, autoescaped)
    write_html(run_path, out)      the page written to `out` (default `<run_path>/report.html`)

The page holds everything inline (CSS, an SVG chart of the score per round, diffs highlighted by
Pygments): no network fetch, so it works from a CI artifact. Sections: the headline (suite, split, model,
harness id, score, pass^k, tokens, cost, wall-clock); for an evolution run the chart, a rounds table and,
per round, its outcome and reason, spec, diff and flipped tasks, then the test split start vs frozen; the
failure groups of the run with each record's trajectory (tool results as the model saw them); weak passes
and suspect tasks; for a gate the verdict and the regressions.

Bad input never raises: a missing, unreadable, half-written (interrupted) or older-schema run directory
gives a page whose "What is missing" box names each file or field it could not use. Only writing the
output file can fail (RunDirError). No tau2 or network imports.

The data comes from `html_view.gather`; this module renders it (Jinja2) and writes the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jinja2 import ChainableUndefined, Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from pygments.formatters import HtmlFormatter

from pytest_ecdysis.core import safetext
from pytest_ecdysis.core.errors import RunDirError
from pytest_ecdysis.core.records import SCHEMA_VERSION
from pytest_ecdysis.core.secrets import redact
from pytest_ecdysis.report.html_view import _num, gather


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("pytest_ecdysis.report", "templates"),
        autoescape=select_autoescape(["j2", "html"]),
        undefined=ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        # text from outside (tool results, endpoint errors) shows control characters and bidi
        # overrides as visible escapes (safetext), as the terminal and Markdown reports do
        finalize=lambda x: x if isinstance(x, Markup) or not isinstance(x, str) else safetext.terminal(x),
    )
    env.filters["score"] = lambda x, d=3: "–" if _num(x) is None else f"{_num(x):.{d}f}"
    # text inside <pre>: only &, < and > need escaping (quotes as &#34; would make tool results ~10% longer)
    env.filters["pre"] = lambda x: Markup(
        safetext.terminal(x).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    )
    env.filters["pairs"] = lambda x: list(x.items()) if isinstance(x, dict) else []
    env.filters["tojson_pretty"] = lambda x: json.dumps(x, indent=2, ensure_ascii=False, default=str)
    return env


def render_view(view: dict[str, Any]) -> str:
    """The page of a `gather` result. A template error (a field of a shape no version wrote) still gives a
    page: a short one naming the error and the run's missing files, never a traceback."""
    css = re.sub(r"\s*/\*.*?\*/", "", HtmlFormatter(cssclass="diff").get_style_defs(".diff"))
    try:
        return (
            _env().get_template("report.html.j2").render(v=view, diff_css=Markup(css), schema=SCHEMA_VERSION)
        )
    except Exception as exc:  # noqa: BLE001 - the last resort of "never a traceback"
        notes = "".join(
            f"<li>{escape(m)}</li>" for m in [*view.get("missing", []), f"{type(exc).__name__}: {exc}"]
        )
        return (
            f"<!DOCTYPE html><html lang=en><meta charset=utf-8><title>ecdysis · {escape(view.get('run_id'))}"
            f"</title><h1>Run {escape(view.get('run_id'))}: the page could not be drawn</h1>"
            f"<p>What is missing or unreadable:</p><ul>{notes}</ul></html>"
        )


def render(run_path: Path | str) -> str:
    """The HTML page of a run directory (a str; never raises on bad input, see the module docstring)."""
    return render_view(gather(run_path))


def write_html(run_path: Path | str, out: Path | str | None = None) -> tuple[Path, list[str]]:
    """Write the page (default `<run_path>/report.html`); returns its path and what was missing.

    Raises:
        RunDirError: the output file cannot be written.
    """
    target = Path(out) if out is not None else Path(run_path) / "report.html"
    view = gather(run_path)
    page = render_view(view)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(redact(page), encoding="utf-8")
    except OSError as exc:
        raise RunDirError(f"cannot write the HTML report to {target}: {exc}; pass a writable path") from None
    return target, list(view["missing"])
