"""The console's certificate settings are checked before it listens (console/tls.py): each
way a hospital can get them wrong is said in one line, and the certificate's names become
names the console answers to."""

from __future__ import annotations

import os
from pathlib import Path

from console.tls import certificate_names, tls_on, tls_problem
from runtime.settings import Settings
from tests.tls_certs import self_signed


def tls(cert: Path | str, key: Path | str) -> Settings:
    return Settings(console_tls_cert=str(cert), console_tls_key=str(key))


def test_a_good_pair_is_served_and_its_names_are_the_consoles(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, ("lea.hospital.example", "LEA"), ("192.0.2.1",))
    assert tls_on(tls(cert, key)) and tls_problem(tls(cert, key)) is None
    assert certificate_names(str(cert)) == {"lea.hospital.example", "lea", "192.0.2.1"}
    assert not tls_on(Settings()) and tls_problem(Settings()) is None


def test_each_wrong_certificate_setting_is_refused_saying_why(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path / "a")
    other_cert, other_key = self_signed(tmp_path / "b")
    cases = [
        (Settings(console_tls_cert=str(cert)), "LEA_CONSOLE_TLS_KEY is not"),
        (Settings(console_tls_key=str(key)), "LEA_CONSOLE_TLS_CERT is not"),
        (tls(tmp_path / "none.crt", key), "no such file"),
        (tls(cert, tmp_path / "none.key"), "no such file"),
        (tls(cert, other_key), "cannot be used together"),
        (tls(key, key), "cannot be used together"),
    ]
    for settings, problem in cases:
        found = tls_problem(settings)
        assert found is not None and problem in found, (settings, found)
    os.chmod(other_key, 0o640)
    found = tls_problem(tls(other_cert, other_key))
    assert found is not None and "chmod 600" in found
    assert certificate_names(str(key)) == frozenset()
