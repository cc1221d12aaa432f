"""Reading a user's attached file: rows and typed columns from CSV, TSV, JSON and XLSX, text from
plain text, Markdown, HTML, PDF and DOCX. Pure parsers only: nothing a file contains is run
(a spreadsheet's formulas are read as their cached values, HTML's scripts are dropped), and
zip-based formats are checked for decompression bombs before they are opened.

The limits and the shape of the answer are n8n's own `parse-file` tool's: pages of at most 100
rows (20 by default) within 2,000 cells and 40,000 characters, 50 columns, 5,000 characters a
cell; column names normalised to snake_case for data tables.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import zipfile
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any, Literal

__all__ = [
    "DEFAULT_MAX_ROWS",
    "FORMATS",
    "MAX_ROWS_PER_CALL",
    "Column",
    "Format",
    "ParseError",
    "Parsed",
    "detect_format",
    "parse",
]

Format = Literal["csv", "tsv", "json", "xlsx", "text", "markdown", "html", "pdf", "docx"]
FORMATS: tuple[Format, ...] = (
    "csv",
    "tsv",
    "json",
    "xlsx",
    "text",
    "markdown",
    "html",
    "pdf",
    "docx",
)
TABULAR = ("csv", "tsv", "json", "xlsx")
MAX_COLUMNS = 50
MAX_ROWS_PER_CALL = 100
DEFAULT_MAX_ROWS = 20
MAX_CELLS_PER_CALL = 2_000
MAX_RESULT_CHARS = 40_000
MAX_CELL_CHARS = 5_000
# Zip-based formats (XLSX, DOCX): what they may inflate to, in all and against their size.
MAX_UNZIPPED_BYTES = 200 * 1024 * 1024
MAX_ZIP_RATIO = 200

_BY_EXTENSION: dict[str, Format] = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".json": "json",
    ".xlsx": "xlsx",
    ".txt": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
_BY_MIME: dict[str, Format] = {
    "text/csv": "csv",
    "application/csv": "csv",
    "text/tab-separated-values": "tsv",
    "application/json": "json",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
}
_DANGEROUS_KEYS = frozenset({"__proto__", "constructor", "prototype"})
_RESERVED_COLUMNS = frozenset({"id", "created_at", "updated_at"})
_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}.*)?|\d{2}/\d{2}/\d{4})$")

Cell = str | int | float | bool | None


class ParseError(Exception):
    """The file cannot be read as asked; the message says why, for the agent."""


@dataclass(frozen=True, kw_only=True)
class Column:
    original_name: str
    name: str
    inferred_type: Literal["string", "number", "boolean", "date"]
    index: int


@dataclass(kw_only=True)
class Parsed:
    format: Format
    columns: list[Column] = field(default_factory=list)
    rows: list[dict[str, Cell]] = field(default_factory=list)
    total_rows: int = 0
    truncated: bool = False
    next_start_row: int | None = None
    content: str | None = None
    title: str | None = None
    pages: int | None = None
    warnings: list[str] = field(default_factory=list)


def detect_format(name: str, mime_type: str) -> Format | None:
    """By extension first, then by MIME type (n8n's order)."""
    dot = name.rfind(".")
    extension = name[dot:].lower() if dot >= 0 else ""
    return _BY_EXTENSION.get(extension) or _BY_MIME.get(mime_type.split(";")[0].strip().lower())


def parse(
    data: bytes,
    format: Format,
    *,
    has_header: bool = True,
    delimiter: str | None = None,
    start_row: int = 0,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> Parsed:
    if format in TABULAR:
        if format == "json":
            headers, rows = _json_rows(data)
        elif format == "xlsx":
            headers, rows = _xlsx_rows(data, has_header)
        else:
            headers, rows = _delimited_rows(data, format, has_header, delimiter)
        return _page(format, headers, rows, start_row, min(max_rows, MAX_ROWS_PER_CALL))
    if format in ("text", "markdown"):
        return _text(format, _decode(data))
    if format == "html":
        return _html(data)
    if format == "pdf":
        return _pdf(data)
    return _text("docx", _docx_text(data))


# -- tables ---------------------------------------------------------------------------------


def _decode(data: bytes) -> str:
    return data.decode("utf-8-sig", errors="replace")


def _delimited_rows(
    data: bytes, format: Format, has_header: bool, delimiter: str | None
) -> tuple[list[str], list[list[Cell]]]:
    separator = delimiter or ("\t" if format == "tsv" else ",")
    try:
        records = [
            [cell.strip() for cell in record]
            for record in csv.reader(io.StringIO(_decode(data)), delimiter=separator, strict=True)
            if any(cell.strip() for cell in record)
        ]
    except csv.Error as exc:
        raise ParseError(f"not valid {format.upper()}: {exc}") from None
    if not records:
        return [], []
    if has_header:
        headers, body = records[0], records[1:]
    else:
        headers, body = [f"column_{i}" for i in range(len(records[0]))], records
    for header in headers:
        if header.strip() in _DANGEROUS_KEYS:
            raise ParseError(f'dangerous column header "{header.strip()}" in the {format} data')
    return headers, [list(row) for row in body]


def _json_rows(data: bytes) -> tuple[list[str], list[list[Cell]]]:
    try:
        parsed = json.loads(_decode(data))
    except json.JSONDecodeError as exc:
        raise ParseError(f"invalid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(parsed, list):
        raise ParseError("expected a JSON array of objects, got a single value or object")
    headers: dict[str, None] = {}
    for item in parsed:
        if not isinstance(item, dict):
            raise ParseError("JSON array items must be flat objects (not arrays, nulls or values)")
        for key, value in item.items():
            if key in _DANGEROUS_KEYS:
                raise ParseError(f'dangerous key "{key}" in the JSON data')
            if isinstance(value, dict | list):
                kind = "array" if isinstance(value, list) else "object"
                raise ParseError(f'nested {kind} at key "{key}": only flat objects are supported')
            headers.setdefault(key, None)
    names = list(headers)
    return names, [[item.get(name) for name in names] for item in parsed]


def _check_zip(data: bytes, what: str) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            inflated = sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile:
        raise ParseError(f"not a valid {what} file (it is not a zip archive)") from None
    if inflated > MAX_UNZIPPED_BYTES or inflated > MAX_ZIP_RATIO * max(len(data), 1):
        raise ParseError(
            f"the {what} file would inflate to {inflated // (1024 * 1024)} MB: refused as a "
            "possible decompression bomb"
        )


def _xlsx_rows(data: bytes, has_header: bool) -> tuple[list[str], list[list[Cell]]]:
    import openpyxl  # imported here: only attachments need it

    _check_zip(data, "XLSX")
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many kinds for broken files
        raise ParseError(f"not a readable XLSX file ({exc})") from None
    try:
        if not book.sheetnames:
            raise ParseError("the workbook has no sheets")
        sheet = book[book.sheetnames[0]]
        records = [
            [_xlsx_cell(v) for v in row]
            for row in sheet.iter_rows(values_only=True)
            if any(v is not None and str(v).strip() for v in row)
        ]
    finally:
        book.close()
    if not records:
        raise ParseError(f'the first sheet "{book.sheetnames[0]}" is empty')
    width = max(len(r) for r in records)
    records = [r + [None] * (width - len(r)) for r in records]
    if has_header:
        headers = [str(v) if v is not None else f"column_{i}" for i, v in enumerate(records[0])]
        return headers, records[1:]
    return [f"column_{i}" for i in range(width)], records


def _xlsx_cell(value: Any) -> Cell:
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _normalise(names: list[str]) -> list[str]:
    """snake_case names a data table accepts, unique, never a reserved column."""
    seen: dict[str, int] = {}
    out = []
    for raw in names:
        name = re.sub(r"([a-z])([A-Z])", r"\1_\2", raw.strip()).lower()
        name = re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]", "_", name)).strip("_") or "column"
        if not name[0].isalpha():
            name = f"col_{name}"
        if name in _RESERVED_COLUMNS:
            name = f"data_{name}"
        count = seen.get(name, 0)
        seen[name] = count + 1
        if count:
            candidate = f"{name}_{count}"
            while candidate in seen:
                candidate = f"{candidate}_1"
            seen[candidate] = 1
            name = candidate
        out.append(name)
    return out


def _infer(values: list[Cell]) -> Literal["string", "number", "boolean", "date"]:
    present = [v for v in values if v is not None and v != ""]
    if not present:
        return "string"
    if all(isinstance(v, bool) or str(v).lower() in ("true", "false") for v in present):
        return "boolean"
    if all(_numeric(v) for v in present):
        return "number"
    if all(isinstance(v, str) and _DATE.match(v) for v in present):
        return "date"
    return "string"


def _numeric(value: Cell) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    try:
        float(str(value))
    except ValueError:
        return False
    return True


def _cell(value: Cell, column: int, row: int) -> Cell:
    if value is None or value == "":
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str) and len(value) > MAX_CELL_CHARS:
        raise ParseError(
            f"the cell at row {row}, column {column} is over {MAX_CELL_CHARS} characters"
        )
    return value


def _page(
    format: Format, headers: list[str], rows: list[list[Cell]], start: int, size: int
) -> Parsed:
    if len(headers) > MAX_COLUMNS:
        raise ParseError(f"too many columns: {len(headers)} (at most {MAX_COLUMNS})")
    names = _normalise(headers)
    window = rows[start : start + size]
    columns = [
        Column(
            original_name=raw,
            name=names[i],
            inferred_type=_infer([r[i] if i < len(r) else None for r in window]),
            index=i,
        )
        for i, raw in enumerate(headers)
    ]
    page = [
        {
            names[i]: _cell(row[i] if i < len(row) else None, i, start + n)
            for i in range(len(headers))
        }
        for n, row in enumerate(window)
    ]
    parsed = Parsed(format=format, columns=columns, rows=page, total_rows=len(rows))
    if headers and len(page) * len(headers) > MAX_CELLS_PER_CALL:
        parsed.rows = page[: MAX_CELLS_PER_CALL // len(headers)]
        parsed.warnings.append(
            f"cut to {len(parsed.rows)} rows to stay within {MAX_CELLS_PER_CALL} cells"
        )
    if len(_json_size(columns, parsed.rows)) > MAX_RESULT_CHARS:
        # The most rows that fit (at least one): a binary search over the count.
        low, high = 1, len(parsed.rows)
        while low < high:
            middle = (low + high + 1) // 2
            fits = len(_json_size(columns, parsed.rows[:middle])) <= MAX_RESULT_CHARS
            low, high = (middle, high) if fits else (low, middle - 1)
        parsed.rows = parsed.rows[:low]
        parsed.warnings.append(f"cut to {low} rows to stay within {MAX_RESULT_CHARS} characters")
    parsed.truncated = len(parsed.rows) < len(page)
    if start + len(parsed.rows) < len(rows):
        parsed.next_start_row = start + len(parsed.rows)
    return parsed


def _json_size(columns: list[Column], rows: list[dict[str, Cell]]) -> str:
    return json.dumps({"columns": [c.__dict__ for c in columns], "rows": rows})


# -- documents ------------------------------------------------------------------------------


def _text(format: Format, text: str) -> Parsed:
    content = text.strip()
    if not content:
        raise ParseError("the file contains no extractable text")
    return Parsed(
        format=format,
        content=content[:MAX_RESULT_CHARS],
        truncated=len(content) > MAX_RESULT_CHARS,
    )


def _html(data: bytes) -> Parsed:
    from server.domain.web import readable_markdown

    title, markdown = readable_markdown(_decode(data))
    parsed = _text("html", markdown)
    parsed.title = title or None
    return parsed


def _pdf(data: bytes) -> Parsed:
    import pypdf

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception as exc:  # pypdf raises many kinds for broken files
        raise ParseError(f"not a readable PDF ({exc})") from None
    parsed = _text("pdf", "\n\n".join(pages))
    parsed.pages = len(pages)
    return parsed


def _docx_text(data: bytes) -> str:
    import docx

    _check_zip(data, "DOCX")
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises many kinds for broken files
        raise ParseError(f"not a readable DOCX file ({exc})") from None
    lines = [p.text for p in document.paragraphs]
    for table in document.tables:
        lines += [" | ".join(cell.text for cell in row.cells) for row in table.rows]
    return "\n".join(lines)
