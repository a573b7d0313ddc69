"""MkDocs hooks: the site's pages come from the README and the CLI, never copies.

The README is the one text users read first (and on the package index); each of its
``## `` sections becomes a page here, so the two cannot drift apart. A page per CLI
command shows that command's ``--help`` as the parser prints it. The API reference is
mkdocstrings reading the docstrings (docs/api/*.md).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
API = ["fairstream", "fairstream.testing", "fairstream.assign", "fairstream.spark"]


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _readme_pages() -> list[tuple[str, str, str]]:
    """``(title, file name, markdown)`` per ``## `` section; the intro is the home page."""
    text = (ROOT / "README.md").read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    pages = [("Home", "index.md", parts[0])]
    for title, body in zip(parts[1::2], parts[2::2], strict=True):
        pages.append((title, f"{_slug(title)}.md", f"# {title}\n{body}"))
    return pages


def _commands() -> list[tuple[str, str]]:
    """``(command, help text)`` for ``fairstream --help`` and every subcommand."""
    from fairstream.cli import build_parser

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


def _cli_page(command: str, text: str) -> str:
    return f"# `{command}`\n\n```text\n{text}```\n"


def on_config(config: MkDocsConfig, **_: Any) -> MkDocsConfig:
    with contextlib.redirect_stdout(io.StringIO()):
        commands = _commands()
    config["nav"] = [
        *({title: name} for title, name, _ in _readme_pages()),
        {"CLI": [{cmd: f"cli/{_slug(cmd)}.md"} for cmd, _ in commands]},
        {"API reference": [{name: f"api/{name}.md"} for name in API]},
    ]
    return config


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    for _title, name, text in _readme_pages():
        files.append(File.generated(config, name, content=text))
    for command, text in _commands():
        files.append(
            File.generated(config, f"cli/{_slug(command)}.md", content=_cli_page(command, text))
        )
    for name in API:
        files.append(
            File.generated(config, f"api/{name}.md", content=f"# `{name}`\n\n::: {name}\n")
        )
    return files
