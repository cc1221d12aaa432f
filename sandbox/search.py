"""Searching the workspace: GNU grep in the sandbox, its argument list built and its output read
here, so the worker and the exec path run the same search and answer the same way.

Patterns are Perl-compatible (`grep -P`: `\\d`, `\\s`, lookarounds), since that is what people and
models write; PCRE2's match limits and the sandbox's deadline bound a pathological one. Binary
files, `.git` and `node_modules` are skipped; symlinks met on the way are not followed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sandbox.errors import InvalidPatternError

__all__ = [
    "MAX_OUTPUT_BYTES",
    "TIMEOUT_S",
    "GrepLine",
    "GrepQuery",
    "GrepResult",
    "grep_argv",
    "read_grep_output",
]

# What the sandbox passes back at most (the search stops there and says it was cut).
MAX_OUTPUT_BYTES = 512 * 1024
MAX_LINE_CHARS = 400
TIMEOUT_S = 10
_LINE = re.compile(r"^(\d+)([:-])(.*)$", re.DOTALL)


@dataclass(frozen=True, kw_only=True)
class GrepQuery:
    pattern: str
    path: str = "."  # workspace-relative, already confined
    glob: str | None = None
    ignore_case: bool = False
    context_lines: int = 0
    max_matches: int = 100


@dataclass(frozen=True, kw_only=True)
class GrepLine:
    path: str
    line: int
    text: str
    match: bool  # False: a context line


@dataclass(kw_only=True)
class GrepResult:
    lines: list[GrepLine] = field(default_factory=list)
    matches: int = 0
    files: int = 0
    truncated: bool = False


def grep_argv(query: GrepQuery) -> list[str]:
    """grep's arguments (without the program name) for `query`."""
    argv = ["-r", "-n", "-I", "-P", "-s", "--null", "--color=never"]
    argv += ["--exclude-dir=.git", "--exclude-dir=node_modules"]
    # -m counts per file: one more than asked tells the reader the cap was reached.
    argv += ["-m", str(query.max_matches + 1)]
    if query.ignore_case:
        argv.append("-i")
    if query.context_lines:
        argv += ["-C", str(query.context_lines)]
    if query.glob:
        argv.append(f"--include={query.glob}")
    return [*argv, "-e", query.pattern, "--", query.path]


def read_grep_output(
    query: GrepQuery, exit_code: int, stdout: bytes, stderr: bytes, *, cut: bool
) -> GrepResult:
    """The matches (with their context lines) from grep's `--null` output; a bad pattern is
    an InvalidPatternError. `cut`: the sandbox stopped reading at its byte limit."""
    message = stderr.decode(errors="replace").strip()
    if exit_code == 2 and message:
        raise InvalidPatternError(
            f"the pattern {query.pattern!r} is not a valid Perl-compatible regular expression "
            f"({message.removeprefix('grep: ')}); escape special characters such as ( [ . *"
        )
    result = GrepResult(truncated=cut)
    files: set[str] = set()
    records = stdout.decode(errors="replace").split("\n")
    if cut:
        records = records[:-1]  # the last one may be half a line
    for record in records:
        name, separator, rest = record.partition("\0")
        found = _LINE.match(rest) if separator else None
        if found is None:
            continue  # "--" between groups, or the empty string after the last newline
        is_match = found.group(2) == ":"
        if is_match and result.matches == query.max_matches:
            result.truncated = True
            break
        path = name.removeprefix("./")
        result.lines.append(
            GrepLine(
                path=path,
                line=int(found.group(1)),
                text=found.group(3)[:MAX_LINE_CHARS],
                match=is_match,
            )
        )
        if is_match:
            result.matches += 1
            files.add(path)
    result.files = len(files)
    return result
