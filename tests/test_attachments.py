"""Files attached to a message: SendMessage with attachments (limits refused before anything is
stored), the files kept with the thread and copied into the workspace, and the agent reading
them page by page with parse-file through the Messages API stand-in — a CSV, an XLSX, a PDF and
a malformed file — plus the parsers on their own (DOCX, HTML, JSON, TSV, a decompression bomb)."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from datetime import datetime
from typing import Any

import docx
import grpc
import openpyxl
import pytest

from instance_ai.v1 import agent_pb2
from server.domain.file_parsing import ParseError, detect_format, parse
from server.settings import Settings
from tests.agent_fixtures import Chat, model, model_settings, tool_result
from tests.conftest import serving
from tests.fake_model import FakeMessagesAPI, text, tool
from tests.tool_client import ToolClient
from tests.web_servers import pdf_with

__all__ = ["model", "model_settings"]  # fixtures, shared

CSV = (
    "Order ID,Customer Name,Amount,Paid,Ordered At\n"
    "1,Ada,12.5,true,2026-11-01\n"
    "2,Grace,7,false,2026-11-02\n"
    "3,Linus,,true,2026-11-03\n"
    "\n"
    "4,Margaret,30,false,2026-11-04\n"
    "5,Barbara,1.25,true,2026-11-05\n"
)


def xlsx() -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["SKU", "Price", "Added", "Doubled"])
    sheet.append(["A-1", 3.5, datetime(2026, 1, 2, 3, 4, 5), "=B2*2"])
    sheet.append(["B-2", 10, datetime(2026, 2, 3), "=B3*2"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def docx_file() -> bytes:
    document = docx.Document()
    document.add_paragraph("Refund policy")
    document.add_paragraph("Refunds are issued within 14 days.")
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "Tier", "Days"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def attachment(name: str, data: bytes, mime_type: str = "") -> agent_pb2.Attachment:
    return agent_pb2.Attachment(name=name, mime_type=mime_type, data=data)


async def send(
    channel: grpc.aio.Channel, thread: str, message: str, files: list[agent_pb2.Attachment]
) -> str:
    response = await Chat(channel).agent.SendMessage(
        agent_pb2.SendMessageRequest(thread_id=thread, message=message, attachments=files)
    )
    return str(response.run_id)


def result_of(model: FakeMessagesAPI, call_id: str) -> dict[str, Any]:
    content = tool_result(model, call_id)["content"]
    body = content if isinstance(content, str) else content[0]["text"]
    return dict(json.loads(body))


async def test_the_agent_reads_attached_files_page_by_page(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    files = [
        attachment("orders.csv", CSV.encode(), "text/csv"),
        attachment("prices.xlsx", xlsx()),
        attachment("report.pdf", pdf_with("Quarterly revenue grew 12 percent"), "application/pdf"),
        attachment("broken.xlsx", b"PK\x03\x04 not really a workbook"),
        attachment("photo.png", b"\x89PNG\r\n", "image/png"),
    ]
    pages = [("p1", 0, 2), ("p2", 2, 2), ("p3", 4, 2)]
    model.script(
        *[tool("parse-file", {"maxRows": n, "startRow": s}, call_id=c) for c, s, n in pages],
        tool("parse-file", {"attachmentIndex": 1}, call_id="x"),
        tool("parse-file", {"attachmentIndex": 2}, call_id="pdf"),
        tool("parse-file", {"attachmentIndex": 3}, call_id="bad"),
        tool("parse-file", {"attachmentIndex": 4}, call_id="png"),
        tool("parse-file", {"attachmentIndex": 5}, call_id="none"),
        text("Read them all."),
    )
    settings = model_settings(sandbox_provider="local")
    async with serving(settings) as (_app, channel):
        chat = Chat(channel)
        run = await send(channel, "a1", "Load these into a table", files)
        finished = await chat.finished("a1", run)
        assert finished[-1]["payload"]["status"] == "completed"
        # The files reached the workspace, byte for byte.
        tools = ToolClient(channel, "a1")
        copied = await tools.call("workspace_read_file", path="attachments/0-orders.csv")
        assert copied["content"] == CSV

    first = model.requests[0]
    assert "parse-file" in {t["name"] for t in first["tools"]}
    message = first["messages"][0]["content"][0]["text"]
    assert message.startswith("Load these into a table\n\n<attachments>\n")
    assert "0: orders.csv (text/csv, 0.2 KB) — read with parse-file (attachmentIndex 0)" in message
    assert "4: photo.png (image/png, 0.0 KB) — not a format parse-file reads" in message
    assert "workspace: attachments/2-report.pdf" in message

    p1, p2, p3 = (result_of(model, c) for c, _, _ in pages)
    assert [c["name"] for c in p1["columns"]] == [
        "order_id",
        "customer_name",
        "amount",
        "paid",
        "ordered_at",
    ]
    assert [c["inferredType"] for c in p1["columns"]] == [
        "number",
        "string",
        "number",
        "boolean",
        "date",
    ]
    assert p1["totalRows"] == 5 and p1["nextStartRow"] == 2 and p1["returnedRows"] == 2
    assert [r["customer_name"] for r in p1["rows"] + p2["rows"] + p3["rows"]] == [
        "Ada",
        "Grace",
        "Linus",
        "Margaret",
        "Barbara",
    ]
    assert p2["rows"][0]["amount"] is None  # an empty cell
    assert p3.get("nextStartRow") is None and p3["returnedRows"] == 1

    sheet = result_of(model, "x")
    assert sheet["format"] == "xlsx" and sheet["totalRows"] == 2
    assert sheet["rows"][0] == {
        "sku": "A-1",
        "price": 3.5,
        "added": "2026-01-02T03:04:05",
        "doubled": None,  # a formula: its cached value (none here), never computed or echoed
    }
    report = result_of(model, "pdf")
    assert report["pages"] == 1 and "Quarterly revenue grew 12 percent" in report["content"]
    bad = result_of(model, "bad")
    assert bad["fileName"] == "broken.xlsx" and "not a valid XLSX file" in bad["error"]
    png = result_of(model, "png")
    assert png["format"] == "unknown" and "Unsupported format" in png["error"]
    assert "Invalid attachmentIndex: 5. Available: 0-4" in result_of(model, "none")["error"]


async def test_parse_file_is_offered_only_with_a_parseable_attachment(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    model.script(text("no files"), text("a picture"), text("a table"))
    async with serving(model_settings()) as (app, channel):
        chat = Chat(channel)
        await chat.finished("a2", await send(channel, "a2", "hello", []))
        picture = [attachment("photo.png", b"\x89PNG", "image/png")]
        await chat.finished("a2", await send(channel, "a2", "look", picture))
        table = [attachment("t.csv", b"a,b\n1,2\n")]
        await chat.finished("a2", await send(channel, "a2", "read", table))
        # Called directly, it reads the thread's latest attachments.
        direct = await ToolClient(channel, "a2").call("parse-file")
        assert direct["rows"] == [{"a": "1", "b": "2"}]  # CSV cells stay text, typed by column
        assert [c["inferredType"] for c in direct["columns"]] == ["number", "number"]
        # They go with the thread.
        assert len(await app.parts.attachments.latest("a2")) == 1
        await chat.agent.DeleteThread(agent_pb2.DeleteThreadRequest(thread_id="a2"))
        assert await app.parts.attachments.latest("a2") == []
    offered = [{t["name"] for t in r["tools"]} for r in model.requests]
    assert ["parse-file" in names for names in offered] == [False, False, True]
    manifest = model.requests[2]["messages"][-1]["content"][0]["text"]
    assert "workspace:" not in manifest  # no sandboxes here: nothing to copy


async def test_attachments_over_the_limits_are_refused_and_nothing_is_kept(
    model_settings: Callable[..., Settings], model: FakeMessagesAPI
) -> None:
    settings = model_settings(max_attachment_bytes=1000, max_attachments_bytes=1500)
    async with serving(settings) as (app, channel):
        cases = [
            ([attachment("big.csv", b"x" * 1001)], grpc.StatusCode.RESOURCE_EXHAUSTED, "per file"),
            (
                [attachment("a.csv", b"x" * 800), attachment("b.csv", b"x" * 800)],
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "per message",
            ),
            ([attachment("", b"x")], grpc.StatusCode.INVALID_ARGUMENT, "name"),
            ([attachment("e.csv", b"")], grpc.StatusCode.INVALID_ARGUMENT, "empty"),
            (
                [attachment(f"{i}.csv", b"x") for i in range(11)],
                grpc.StatusCode.INVALID_ARGUMENT,
                "at most 10",
            ),
        ]
        for files, code, words in cases:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await send(channel, "a3", "here", files)
            assert refused.value.code() is code and words in (refused.value.details() or "")
        assert await app.parts.attachments.latest("a3") == []
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await Chat(channel).status("a3")  # not even the thread was made
        assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
    assert model.requests == []


def test_the_parsers_on_their_own() -> None:
    assert detect_format("notes.MD", "") == "markdown"
    assert detect_format("upload", "text/tab-separated-values") == "tsv"
    assert detect_format("x.bin", "application/octet-stream") is None
    tsv = parse(b"name\tqty\npen\t3\n", "tsv", max_rows=10)
    assert tsv.rows == [{"name": "pen", "qty": "3"}]
    headless = parse(b"1;2\n3;4\n", "csv", has_header=False, delimiter=";")
    assert [c.name for c in headless.columns] == ["column_0", "column_1"]
    assert headless.total_rows == 2
    rows = parse(b'[{"id": 1, "createdAt": "2026-01-01"}, {"id": 2}]', "json")
    assert [c.name for c in rows.columns] == ["data_id", "data_created_at"]  # reserved names
    assert rows.rows[1] == {"data_id": 2, "data_created_at": None}
    with pytest.raises(ParseError, match="nested object"):
        parse(b'[{"a": {"b": 1}}]', "json")
    with pytest.raises(ParseError, match="dangerous"):
        parse(b'[{"__proto__": 1}]', "json")
    with pytest.raises(ParseError, match="not valid CSV"):
        parse(b'a,b\n"unclosed,2\n', "csv")
    document = parse(docx_file(), "docx")
    assert document.content == "Refund policy\nRefunds are issued within 14 days.\nTier | Days"
    page = parse(
        b"<html><head><title>T</title><script>alert(1)</script></head>"
        b"<body><article><p>Shipping takes two days for every order placed before noon, "
        b"and three days otherwise.</p></article></body></html>",
        "html",
    )
    assert page.title == "T" and "Shipping takes two days" in (page.content or "")
    assert "alert" not in (page.content or "")
    with pytest.raises(ParseError, match="too many columns"):
        parse((",".join(f"c{i}" for i in range(60)) + "\n" + "1," * 59 + "1").encode(), "csv")
    many = "\n".join(",".join(f"{r}" for _ in range(40)) for r in range(101)).encode()
    cells = parse(many, "csv", max_rows=100)  # 40 columns: 2,000 cells are 50 rows
    assert len(cells.rows) == 50 and cells.truncated and cells.next_start_row == 50
    assert cells.warnings == ["cut to 50 rows to stay within 2000 cells"]
    wide = "\n".join(",".join("x" * 100 for _ in range(10)) for _ in range(101)).encode()
    chars = parse(wide, "csv", max_rows=100)

    def size(rows: list[Any]) -> int:
        return len(json.dumps({"columns": [c.__dict__ for c in chars.columns], "rows": rows}))

    assert size(chars.rows) <= 40_000 < size([*chars.rows, chars.rows[0]])  # the most that fit
    assert chars.truncated and chars.next_start_row == len(chars.rows)


def test_a_decompression_bomb_is_refused_before_it_is_opened() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/workbook.xml", b"\0" * (60 * 1024 * 1024))
    bomb = out.getvalue()
    assert len(bomb) < 200 * 1024
    for kind in ("xlsx", "docx"):
        with pytest.raises(ParseError, match="decompression bomb"):
            parse(bomb, kind)
