"""The sandbox image's identity depends on what the image carries, never on host state that
running a program changes (a server must not believe its image is missing right after
`make` built it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.image import browser, tools
from sandbox.image.build import image_tags
from tests.browser_fixtures import run_chromium


def test_running_the_hosts_chromium_leaves_the_image_tags_unchanged() -> None:
    # On a machine where Chromium never ran, its first start creates
    # /usr/lib/chromium/extensions; the tags used to move with it.
    before = image_tags()
    with run_chromium():
        pass
    assert image_tags() == before


def test_the_browser_layer_identity_ignores_directories_and_follows_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "chromium"
    tree.mkdir()
    (tree / "chromium").write_bytes(b"\x7fELF binary")
    monkeypatch.setattr(browser, "TREES", (tree,))
    first = browser.inputs_digest({})

    (tree / "extensions").mkdir()  # what a first start creates
    (tree / "extensions" / "nested").mkdir()
    assert browser.inputs_digest({}) == first

    (tree / "extensions" / "added.pak").write_bytes(b"new content")
    assert browser.inputs_digest({}) != first
    (tree / "extensions" / "added.pak").unlink()
    assert browser.inputs_digest({}) == first

    # An upgrade rewrites files: a new size or modification time is a new identity.
    binary = tree / "chromium"
    stat = binary.stat()
    os.utime(binary, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert browser.inputs_digest({}) != first


def test_the_tools_layer_identity_ignores_bytecode_and_follows_sources(tmp_path: Path) -> None:
    # A host python3 run as root compiles what it imports into the standard library's
    # __pycache__; the tags must not move with that, only with the sources.
    source = tmp_path / "json.py"
    source.write_text("x = 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    files = {"usr/lib/python3/json.py": source, "usr/lib/python3/__pycache__": cache}
    first = tools.inputs_digest(files)

    compiled = cache / "json.cpython-311.pyc"
    compiled.write_bytes(b"bytecode")
    with_bytecode = {**files, "usr/lib/python3/__pycache__/json.cpython-311.pyc": compiled}
    assert tools.inputs_digest(with_bytecode) == first

    source.write_text("x = 22\n")
    assert tools.inputs_digest(files) != first
