"""The Windows agent folder's recipe (cli/bundle.py): what goes in, without building it.

Building and running the folder is tests/integration/test_wine_agent.py's job (under Wine).
"""

from __future__ import annotations

from pathlib import Path

from cli import bundle, installer


def test_the_folder_holds_the_agent_and_what_it_imports_only() -> None:
    modules = bundle.agent_modules()
    for needed in ("agent.process", "agent.protocol.ledger", "agent.windows.console_stop",
    "agent.windows.session_end",
                   "agent.executors.desktop", "agent.screen.win32", "transport.worker",
                   "transport.client", "runtime.settings", "messages.codec", "agent.command",
                   "agent.link.broker_link", "runtime.liveness", "workflow.monitors"):
        assert needed in modules
    for server_side in ("actors", "console", "supervision", "broker", "cli", "audit_outbox"):
        assert server_side not in modules
    files = bundle.agent_files()
    assert Path("agent/__main__.py") in files and Path("transport/__init__.py") in files
    assert all(p.suffix == ".py" for p in files)


def test_windows_requirements_come_from_pyproject(tmp_path: Path) -> None:
    resolved, no_deps = bundle.requirements()
    assert "numpy==1.26.4" in resolved  # within pyproject's range; what Wine can run
    assert any(r.startswith("pyzmq>=") for r in resolved)
    assert any(r.startswith("filelock>=") for r in resolved)
    assert {"colorama>=0.3.4", "win32-setctime>=1.0.0"} <= set(resolved)
    assert any(r.startswith("pyautogui>=") for r in no_deps)
    assert not any("python-xlib" in r or ";" in r for r in resolved + no_deps)

    lacking = tmp_path / "pyproject.toml"
    lacking.write_text('[project]\ndependencies = ["pyzmq>=26"]\n')
    try:
        bundle.requirements(lacking)
    except bundle.BundleError as exc:
        assert "msgpack" in str(exc)
    else:
        raise AssertionError("a pyproject without the agent's dependencies was accepted")


def test_the_launcher_is_a_windows_batch_file() -> None:
    launcher = installer.LAUNCHER
    assert "\r" not in launcher  # written with CRLF by build()
    assert '-m agent "@%HOME_DATA%\\agent.args"' in launcher  # the installed command line
    assert '-m agent status --data-dir "%HOME_DATA%\\agent"' in launcher
    assert bundle.PTH.splitlines() == ["python311.zip", ".", "..\\site", "..\\app",
                                       "import site"]


def test_an_existing_folder_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious").write_text("x")
    try:
        bundle.build(tmp_path / "out", tmp_path / "cache")
    except bundle.BundleError as exc:
        assert "not empty" in str(exc)
    else:
        raise AssertionError("built over a non-empty folder")
    assert (tmp_path / "out" / "precious").read_text() == "x"


def test_the_installer_script_names_what_it_installs(tmp_path: Path) -> None:
    script = installer.nsis_script(tmp_path / "lea-agent", tmp_path / "setup.exe")
    assert "Target amd64-unicode" in script and "RequestExecutionLevel user" in script
    assert f'File /r "{tmp_path / "lea-agent"}\\*.*"' in script
    assert "@" + "TASK" not in script and "$LOCALAPPDATA\\Programs\\Lea Agent" in script
    assert "<ExecutionTimeLimit>PT0S</ExecutionTimeLimit>" in script
    assert "SetCompress off" in installer.nsis_script(tmp_path, tmp_path / "s.exe", False)
