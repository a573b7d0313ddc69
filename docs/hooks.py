"""MkDocs hooks: a page per CLI command, and a build that fails on raw roles.

The pages are written in docs/ and their code samples are the tested files of
examples/ (included with pymdownx.snippets), so nothing here is a copy that can drift.
What cannot be written by hand without drifting is the CLI's ``--help``: a page per
command shows it as the parser prints it, listed under "Reference > CLI" in the nav.

A Sphinx role that reaches the HTML (``:class:`App```) means a docstring's
cross-reference was not converted (docs/griffe_roles.py does that); a snippet marker
that reaches it means an include failed. Either fails the build, so ``make docs``
cannot publish them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

CLI_INDEX = "reference/cli/index.md"
RAW_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|mod|exc|data|obj|const|type|ref|doc)"
    r":(?:`|<code>)"
)
RAW_SNIPPET = re.compile(r"--8&lt;--|--8<--")
# Code blocks show source as it is (an example's docstring may use a role): not checked.
CODE_BLOCK = re.compile(r"<pre\b.*?</pre>", re.S)


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _commands() -> list[tuple[str, str]]:
    """``(command, help text)`` for ``fairstream --help`` and every subcommand."""
    from fairstream.cli import build_parser

    with contextlib.redirect_stdout(io.StringIO()):
        parser = build_parser(env={})
    found = [("fairstream", parser.format_help())]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((f"fairstream {name}", sub.format_help()))
                for inner in sub._actions:
                    if isinstance(inner, argparse._SubParsersAction):
                        found.extend(
                            (f"fairstream {name} {leaf}", leaf_parser.format_help())
                            for leaf, leaf_parser in inner.choices.items()
                        )
    return found


def _cli_file(command: str) -> str:
    return f"reference/cli/{_slug(command)}.md"


def _cli_index(commands: list[tuple[str, str]]) -> str:
    rows = "\n".join(
        f"| [`{command}`]({_slug(command)}.md) | {_summary(text)} |" for command, text in commands
    )
    return (
        "# Command line\n\n"
        "`fairstream` is installed with the package; each command's page shows its "
        "`--help` as the parser prints it. Options go before or after the command's "
        "name, and every option that has an environment variable "
        "([Configuration](../../getting-started/configuration.md)) reads it.\n\n"
        "| command | what it does |\n|---|---|\n" + rows + "\n"
    )


def _summary(help_text: str) -> str:
    """The first paragraph after the usage lines: the parser's description."""
    paragraphs = [p.strip() for p in help_text.split("\n\n")]
    for paragraph in paragraphs[1:]:
        if paragraph and not paragraph.endswith(":") and ":\n" not in paragraph:
            return " ".join(paragraph.split()).replace("|", "\\|")
    return ""


def on_config(config: MkDocsConfig, **_: Any) -> MkDocsConfig:
    """Put a page per command under the nav entry that points at the CLI index."""
    pages = [{command: _cli_file(command)} for command, _ in _commands()]

    def expand(items: list[Any]) -> None:
        for index, item in enumerate(items):
            if isinstance(item, dict):
                for title, value in item.items():
                    if value == CLI_INDEX:
                        items[index] = {title: [{"Commands": CLI_INDEX}, *pages]}
                    elif isinstance(value, list):
                        expand(value)

    expand(config["nav"])
    return config


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    commands = _commands()
    files.append(File.generated(config, CLI_INDEX, content=_cli_index(commands)))
    for command, text in commands:
        files.append(
            File.generated(
                config, _cli_file(command), content=f"# `{command}`\n\n```text\n{text}```\n"
            )
        )
    return files


def on_post_page(output: str, page: Page, **_: Any) -> str:
    prose = CODE_BLOCK.sub("", output)
    for pattern, what in ((RAW_ROLE, "a raw Sphinx role"), (RAW_SNIPPET, "a snippet marker")):
        found = pattern.search(prose)
        if found:
            context = prose[max(0, found.start() - 80) : found.end() + 80]
            raise PluginError(f"{page.file.src_uri}: {what} in the HTML: ...{context}...")
    return output
