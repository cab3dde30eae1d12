"""kubectl's `-o jsonpath=TEMPLATE` for `tidings list`: the template language around the
paths (literal text, `{"\\n"}`, `{range ...}{end}`) is parsed here; each path is evaluated by
jsonpath-ng (its `ext` parser, for `[?(@.status.phase=="Failed")]` filters).

The subset, as kubectl: `{.items[*].metadata.name}`, `{.items[0].status.phase}`,
`{..name}`, `{['a.b']}`, filters, `{range .items[*]}{.metadata.name}{"\\n"}{end}`. Inside a
range, paths are relative to the current item. Several matches are joined by spaces; maps and
lists print as JSON; a missing key prints nothing (kubectl get's allowMissingKeys).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


class TemplateError(ValueError):
    """An unparsable template (the CLI maps it to exit 2)."""


@dataclass
class _Path:
    expr: Any  # a compiled jsonpath-ng expression


@dataclass
class _Range:
    expr: Any
    body: list[Any] = field(default_factory=list)


Node = str | _Path | _Range


def _compile(text: str) -> Any:
    from jsonpath_ng.ext.parser import parse

    path = text.strip()
    if path.startswith("@"):
        path = "$" + path[1:]
    elif path.startswith(".") or path.startswith("["):
        path = "$" + path
    elif not path.startswith("$"):
        raise TemplateError(f"{text!r} is not a path (start it with '.', e.g. .metadata.name)")
    if path.startswith("$.["):  # kubectl writes {.['a.b']} too
        path = "$" + path[2:]
    try:
        return parse(path)
    except Exception as err:  # its lexer, parser and the ext filters raise various types
        raise TemplateError(f"cannot parse {text!r}: {err}") from None


def _braces(template: str) -> list[tuple[bool, str]]:
    """(is_action, text) pieces: text outside braces, and each {...} body (quotes honoured,
    so {"}"} is one action)."""
    out: list[tuple[bool, str]] = []
    i, n = 0, len(template)
    text: list[str] = []
    while i < n:
        c = template[i]
        if c != "{":
            if c == "}":
                raise TemplateError("unmatched '}'")
            text.append(c)
            i += 1
            continue
        if text:
            out.append((False, "".join(text)))
            text = []
        j, quote = i + 1, ""
        while j < n:
            d = template[j]
            if quote:
                if d == "\\":
                    j += 1
                elif d == quote:
                    quote = ""
            elif d in "\"'":
                quote = d
            elif d == "}":
                break
            j += 1
        if j >= n:
            raise TemplateError("unclosed '{'")
        out.append((True, template[i + 1:j]))
        i = j + 1
    if text:
        out.append((False, "".join(text)))
    return out


def parse_template(template: str) -> list[Node]:
    """The template as nodes; raises TemplateError for anything outside the subset."""
    root: list[Node] = []
    stack: list[list[Node]] = [root]
    for action, text in _braces(template):
        body = text.strip()
        if not action:
            stack[-1].append(text)
        elif body.startswith('"') and body.endswith('"') and len(body) >= 2:
            try:
                stack[-1].append(str(json.loads(body, strict=False)))  # {"\n"}, {"\t"}
            except json.JSONDecodeError:
                raise TemplateError(f"bad string literal {body}") from None
        elif body.startswith("range ") or body == "range":
            node = _Range(_compile(body[len("range"):]))
            stack[-1].append(node)
            stack.append(node.body)
        elif body == "end":
            if len(stack) == 1:
                raise TemplateError("{end} without {range}")
            stack.pop()
        elif not body:
            raise TemplateError("empty {}")
        else:
            stack[-1].append(_Path(_compile(body)))
    if len(stack) != 1:
        raise TemplateError("{range} without {end}")
    return root


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _run(nodes: list[Node], data: Any, out: list[str]) -> None:
    for node in nodes:
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, _Path):
            out.append(" ".join(_text(m.value) for m in node.expr.find(data)))
        else:
            values = [m.value for m in node.expr.find(data)]
            # `{range .items}` iterates the one list it finds, as `{range .items[*]}` does.
            if len(values) == 1 and isinstance(values[0], list):
                values = values[0]
            for item in values:
                _run(node.body, item, out)


def render(template: str, data: Any) -> str:
    """The template applied to `data` (a List or one object)."""
    out: list[str] = []
    _run(parse_template(template), data, out)
    return "".join(out)
