"""``python -m agent @FILE``: the installed agent's command line, one argument a line."""

from __future__ import annotations

from pathlib import Path

from agent.__main__ import expand_args_files


def test_utf16_with_bom_as_the_installer_writes_it_and_utf8(tmp_path: Path) -> None:
    lines = ["--machine-id", "WS12", "--data-dir", r"C:\Users\Hélène\AppData\Local\Lea\agent"]
    utf16 = tmp_path / "agent.args"
    utf16.write_bytes(b"\xff\xfe" + ("\r\n".join(lines) + "\r\n").encode("utf-16-le"))
    assert expand_args_files(["-v", f"@{utf16}", "--curve"]) == ["-v", *lines, "--curve"]
    utf8 = tmp_path / "plain.args"
    utf8.write_text("# a comment\n\n--machine-id\n  WS12  \n", encoding="utf-8")
    assert expand_args_files([f"@{utf8}"]) == ["--machine-id", "WS12"]
