"""The edit operations of the simulated editor's recipes: one function a step's `op`, on a file's source text.

Each `op_<name>(source, *, <step fields>, params)` returns the new source (`OPS` maps a step's `op` to it);
a step that does not apply to this source (no such constant, function or sequence; a text to replace that
does not occur exactly once) raises `RecipeError`, which `sim.editor.recipes` reports as not implementable.
Definitions are found with `ast` and replaced by their exact source span; parameters are written as
Python literals in the harness's own style (`_literal`). No harness code is imported or run.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from typing import Any


class RecipeError(Exception):
    """A recipe that cannot be applied to this harness (reported as not implementable)."""


def _literal(value: Any) -> str:
    """A Python literal for a parameter, strings in double quotes (the harness's own style)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def _top_level(source: str, name: str, kinds: tuple[type, ...]) -> ast.AST | None:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node if isinstance(node, kinds) else None
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node if isinstance(node, kinds) else None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node if isinstance(node, kinds) else None
    return None


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """Character offset of (1-based line, UTF-8 byte column) in the joined source."""
    line = lines[lineno - 1]
    return sum(len(x) for x in lines[: lineno - 1]) + len(line.encode()[:col].decode())


def _replace_span(source: str, node: ast.AST, text: str) -> str:
    lines = source.splitlines(keepends=True)
    start = _offset(lines, node.lineno, node.col_offset)
    end = _offset(lines, node.end_lineno, node.end_col_offset)
    return source[:start] + text + source[end:]


def op_create_file(source: str, *, text: str, params: dict[str, Any]) -> str:
    """Create a file the harness does not have (a new layer module) from `text`; an existing file (another
    recipe created it, or the harness has it) is left as it is."""
    return source if source else text


def op_set_constant(source: str, *, name: str, value: str, params: dict[str, Any]) -> str:
    """Set the value of a top-level `NAME = ...` (the expression only; a trailing comment stays)."""
    node = _top_level(source, name, (ast.Assign, ast.AnnAssign))
    if node is None or node.value is None:
        raise RecipeError(f"no top-level assignment to {name}")
    return _replace_span(source, node.value, value)


def op_ensure_constant(source: str, *, name: str, value: str, after: str = "", comment: str = "",
                       params: dict[str, Any]) -> str:
    """Add `NAME = value` (preceded by `#: comment` lines) after the top-level definition `after` (or the
    imports) unless NAME exists."""
    if _top_level(source, name, (ast.Assign, ast.AnnAssign)) is not None:
        return source
    lines = "".join(f"#: {line}\n" for line in comment.strip().splitlines())
    return _insert_top_level(source, f"\n{lines}{name} = {value}\n", after)


def op_append_line(source: str, *, name: str, line: str, params: dict[str, Any]) -> str:
    """Append `line` to the top-level string constant `name` (a rule to a prompt), unless present."""
    node = _top_level(source, name, (ast.Assign, ast.AnnAssign))
    if node is None or not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
        raise RecipeError(f"no top-level string constant {name}")
    text = node.value.value
    if line.strip() in text:
        return source
    new = text.rstrip("\n") + "\n" + line.strip()
    segment = ast.get_source_segment(source, node.value) or ""
    if segment.startswith('"""') and '"""' not in new and "\\" not in new and not new.endswith('"'):
        literal = '"""\\\n' + new + '"""'
    else:
        literal = repr(new)
    return _replace_span(source, node.value, literal)


def op_replace_text(source: str, *, old: str, new: str, params: dict[str, Any]) -> str:
    """Replace `old` (which must occur exactly once) with `new`; nothing when `new` is already there."""
    if new in source:
        return source
    count = source.count(old)
    if count != 1:
        raise RecipeError(f"the text to replace occurs {count} times (it must occur exactly once): {old[:60]!r}")
    return source.replace(old, new)


def op_extend_sequence(source: str, *, name: str, items: str, params: dict[str, Any]) -> str:
    """Append to a top-level list/tuple literal `NAME` each item of `items` (a Python list literal) not
    already in it, one per line, keeping the literal's own layout."""
    node = _top_level(source, name, (ast.Assign, ast.AnnAssign))
    if node is None or not isinstance(node.value, (ast.List, ast.Tuple)):
        raise RecipeError(f"no top-level list or tuple literal {name}")
    try:
        current = [ast.literal_eval(e) for e in node.value.elts]
    except ValueError:
        raise RecipeError(f"{name} is not a literal sequence") from None
    new = [x for x in ast.literal_eval(items) if x not in current]
    if not new:
        return source
    seq = node.value
    if seq.lineno == seq.end_lineno:  # one-line literal: rewrite it as one item per line
        elements = [ast.get_source_segment(source, e) for e in seq.elts] + [_literal(x) for x in new]
        if isinstance(seq, ast.Tuple) and len(elements) == 1:
            elements[0] += ","
        opening, closing = ("(", ")") if isinstance(seq, ast.Tuple) else ("[", "]")
        body = "".join(f"    {e},\n" for e in elements)
        return _replace_span(source, seq, f"{opening}\n{body}{closing}")
    lines = source.splitlines(keepends=True)
    indent = "    "
    if seq.elts:
        first = lines[seq.elts[0].lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
    if seq.elts and not lines[seq.elts[-1].end_lineno - 1].rstrip().endswith(","):
        last = seq.elts[-1]
        row = lines[last.end_lineno - 1]
        cut = len(row.encode()[: last.end_col_offset].decode())
        lines[last.end_lineno - 1] = row[:cut] + "," + row[cut:]
    addition = "".join(f"{indent}{_literal(x)},\n" for x in new)
    lines.insert(seq.end_lineno - 1, addition)
    return "".join(lines)


def op_replace_function(source: str, *, name: str, code: str, params: dict[str, Any]) -> str:
    """Replace the top-level function `name` (decorators included) with `code`."""
    node = _top_level(source, name, (ast.FunctionDef,))
    if node is None:
        raise RecipeError(f"no top-level function {name}()")
    lines = source.splitlines(keepends=True)
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    replacement = code.rstrip("\n") + "\n"
    return "".join(lines[:start]) + replacement + "".join(lines[node.end_lineno:])


def op_add_function(source: str, *, name: str, code: str, after: str = "",
                    params: dict[str, Any]) -> str:
    """Add a top-level function after the definition `after` (or at the end), unless `name` exists."""
    if _top_level(source, name, (ast.FunctionDef,)) is not None:
        return source
    return _insert_top_level(source, "\n\n" + code.strip("\n") + "\n", after, at_end=not after)


def op_ensure_import(source: str, *, line: str, params: dict[str, Any]) -> str:
    """Add an import line after the last top-level import unless an identical line exists."""
    if any(x.strip() == line.strip() for x in source.splitlines()):
        return source
    tree = ast.parse(source)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    lines = source.splitlines(keepends=True)
    at = imports[-1].end_lineno if imports else _docstring_end(tree)
    lines.insert(at, line.strip() + "\n")
    return "".join(lines)


def _docstring_end(tree: ast.Module) -> int:
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno
    return 0


def _insert_top_level(source: str, text: str, after: str, at_end: bool = False) -> str:
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if at_end:
        return "".join(lines) + text
    if after:
        anchor = _top_level(source, after, (ast.AST,))
        if anchor is None:
            raise RecipeError(f"no top-level definition {after} to insert after")
        at = anchor.end_lineno
    else:
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        at = imports[-1].end_lineno if imports else _docstring_end(tree)
    lines.insert(at, text)
    return "".join(lines)


OPS: dict[str, Callable[..., str]] = {
    "create_file": op_create_file,
    "set_constant": op_set_constant,
    "ensure_constant": op_ensure_constant,
    "extend_sequence": op_extend_sequence,
    "replace_function": op_replace_function,
    "add_function": op_add_function,
    "ensure_import": op_ensure_import,
    "append_line": op_append_line,
    "replace_text": op_replace_text,
}
