"""A griffe extension of the API reference: Sphinx roles in docstrings (``:func:`x```,
``:class:`~a.B```, ``:meth:``, ``:mod:``, ``:data:``, ``:attr:``, ``:exc:``) become cross-references
that link to the object where the site documents it, and stay plain code where it does not.

Each name is resolved in the scope of the object whose docstring holds it (so ``:func:`_execute```
in ``evolora.cli.execute`` means ``evolora.cli.execute._execute``), then written as an optional autorefs reference
(mkdocs-autorefs links it, or renders the title alone without a warning).
"""

from __future__ import annotations

import html
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const|ref):`(~?)([^`]+)`")
"""A Sphinx cross-reference role; group 1 is ``~`` (show the last name only), group 2 the target."""


def resolve(scope: griffe.Object, target: str) -> str:
    """The full path of ``target`` seen from ``scope``: its first name resolved in ``scope``'s
    (and its parents') members and imports, the rest appended; ``target`` itself when unknown."""
    head, _, rest = target.partition(".")
    try:
        path = scope.resolve(head)
    except Exception:  # griffe.NameResolutionError, or an alias griffe cannot follow
        return target
    return f"{path}.{rest}" if rest else path


def rewrite(scope: griffe.Object, text: str) -> str:
    """``text`` with every role replaced by ``<autoref identifier=... optional><code>title</code></autoref>``."""

    def replace(match: re.Match) -> str:
        short, target = match.group(1), match.group(2).strip()
        bare = target.removesuffix("()")
        title = bare.rsplit(".", 1)[-1] if short else bare
        title += "()" if target.endswith("()") else ""
        return (
            f'<autoref identifier="{html.escape(resolve(scope, bare))}" optional>'
            f"<code>{html.escape(title)}</code></autoref>"
        )

    return ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring of a package once it is loaded (names then resolve)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        seen: set[int] = set()

        def visit(obj: griffe.Object) -> None:
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj, obj.docstring.value)
            for member in obj.members.values():
                if not member.is_alias:
                    visit(member)

        visit(pkg)
