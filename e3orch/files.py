"""Files users write and files we must not leave half-written.

Reading the YAML files users write (params files, executor pools) with one-line errors:

PyYAML's ``safe_load`` keeps the last of two equal keys without a word, so a section written
twice loses its first half (its ``out_dir`` among them); here a repeated key is an error naming
both lines. Syntax errors become one line, ``file:line:column: not valid YAML: <problem>``,
instead of PyYAML's multi-line report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key repeated within one mapping."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                continue
            if first != key_node.start_mark.line + 1:
                raise ConstructorError(None, None, f"duplicate key {key!r} (first on line {first})",
                                       key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str) -> Any:
    """``text`` parsed as YAML; a syntax error or a repeated key is a ``ValueError`` of one line
    naming ``source`` and the position."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        what = exc.problem or exc.context or "unreadable"
        raise ValueError(f"{where}: not valid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not valid YAML: {str(exc).splitlines()[0]}") from None


def read_yaml(path: str | Path) -> Any:
    """The YAML file at ``path`` (see :func:`parse_yaml`)."""
    return parse_yaml(Path(path).read_text(), str(path))


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename: an interrupted run
    leaves the previous file whole, never a truncated one."""
    p = Path(path)
    tmp = p.with_name(p.name + ".partial")
    tmp.write_text(text)
    tmp.replace(p)
    return p
