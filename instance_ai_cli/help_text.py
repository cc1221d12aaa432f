"""`--help` that reads as sentences. A command's help is its docstring, wrapped at the source's
line length; Typer's rich help keeps those line breaks in the list of commands and in every
paragraph after the first, so a sentence would end mid-line and go on below. Here each
paragraph of every command's and group's help becomes one line, and the terminal wraps it."""

from __future__ import annotations

import inspect

import typer

__all__ = ["one_line_paragraphs", "sentence_help"]


def one_line_paragraphs(text: str) -> str:
    """`text` with each paragraph's lines joined by spaces; paragraphs stay apart. A paragraph
    laid out on purpose is left as written: click's `\\b` (no rewrapping) or indented lines."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        paragraph if _laid_out(paragraph) else " ".join(paragraph.split())
        for paragraph in paragraphs
    )


def _laid_out(paragraph: str) -> bool:
    lines = paragraph.splitlines()
    return paragraph.startswith("\b") or any(line[:1].isspace() for line in lines[1:])


def sentence_help(app: typer.Typer) -> typer.Typer:
    """Set the help of `app`, of each of its commands and of its groups (recursively) to
    `one_line_paragraphs` of what Typer would show: the `help=` given, else the docstring.
    Run once the app has all its commands; running it again changes nothing."""
    if isinstance(app.info.help, str):
        app.info.help = one_line_paragraphs(app.info.help)
    for command in app.registered_commands:
        text = command.help if command.help is not None else inspect.getdoc(command.callback)
        if text:
            command.help = one_line_paragraphs(text)
    for group in app.registered_groups:
        if isinstance(group.help, str):
            group.help = one_line_paragraphs(group.help)
        if group.typer_instance is not None:
            sentence_help(group.typer_instance)
    return app
