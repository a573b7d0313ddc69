"""A griffe extension: the docstrings' Sphinx roles become cross-references on the site.

The docstrings are written for readers of the code, in Sphinx's style
(``:class:`~fairstream.App```, ``:meth:`stop```). mkdocstrings renders them as
Markdown, where a role stays raw text (``:class:`App```). Here every role becomes an
autorefs link: resolved, it links to the object's entry in the API reference; not
resolved (a private module the site does not document), it renders as plain code.
``docs/hooks.py`` fails the build if a role is left in the HTML all the same.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(
    r":(?:py:)?(?P<role>class|func|meth|attr|mod|exc|data|obj|const|type)"
    r":`(?P<target>[^`]+)`"
)


def _scopes(obj: griffe.Object) -> list[griffe.Object]:
    """The object and its parents, innermost first: where a short name is looked up."""
    found: list[griffe.Object] = []
    current: griffe.Object | None = obj
    while current is not None:
        found.append(current)
        current = current.parent
    return found


def _identifier(obj: griffe.Object, name: str) -> str:
    """The full dotted path a role's target names, read from where the docstring is."""
    name = name.lstrip(".")
    if name.startswith("fairstream"):
        return name
    head = name.split(".", 1)[0]
    for scope in _scopes(obj):
        member = scope.members.get(head)
        if member is None:
            continue
        base = member.target_path if isinstance(member, griffe.Alias) else member.path
        return base + name[len(head) :]
    return name


def _replace(obj: griffe.Object, text: str) -> str:
    def one(match: re.Match[str]) -> str:
        target = match["target"].strip()
        shown = target.lstrip("~")
        if target.startswith("~"):
            shown = shown.rsplit(".", 1)[-1]
        identifier = _identifier(obj, target.lstrip("~"))
        return (
            f'<autoref identifier="{html.escape(identifier)}" optional>'
            f"<code>{html.escape(shown)}</code></autoref>"
        )

    return ROLE.sub(one, text)


def _walk(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = _replace(obj, obj.docstring.value)
    for member in obj.members.values():
        if not isinstance(member, griffe.Alias):
            _walk(member)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _walk(pkg)
