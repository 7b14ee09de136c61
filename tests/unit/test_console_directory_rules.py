"""The directory's settings are checked before the console starts, and a person's role is
the highest of the groups they are in (console/directory_rules.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from console.directory_rules import DirectoryConfig, directory_problem, role_of
from console.startup_checks import startup_problem
from runtime.settings import Settings

GROUPS = {"console_ldap_viewer_group": "cn=V,dc=h", "console_ldap_operator_group": "cn=O,dc=h",
          "console_ldap_admin_group": "cn=A,dc=h"}
GOOD = {"console_ldap_url": "ldaps://ad.hospital.example", "console_ldap_user_base": "dc=h",
        **GROUPS}


@pytest.mark.parametrize(("fields", "problem"), [
    ({}, None),
    (GOOD, None),
    ({**GOOD, "console_ldap_url": "ldap://ad.hospital.example"}, "in clear"),
    ({**GOOD, "console_ldap_url": "ldap://ad.hospital.example",
      "console_ldap_start_tls": True}, None),
    ({**GOOD, "console_ldap_url": "ldap://127.0.0.1:3890/"}, None),
    ({**GOOD, "console_ldap_user_base": ""}, "USER_BASE"),
    ({"console_ldap_url": "ldaps://x", "console_ldap_user_base": "dc=h"}, "at least one"),
    ({**GOOD, "console_ldap_user_filter": "(uid=someone)"}, "{name}"),
    ({**GOOD, "console_ldap_member_filter": "(member=x)"}, "{dn}"),
    ({**GOOD, "console_ldap_enabled_filter": "enabled"}, "parentheses"),
    ({**GOOD, "console_ldap_bind_dn": "cn=svc"}, "go together"),
    ({**GOOD, "console_ldap_url": "ldaps://"}, "no server"),
])
def test_directory_settings_are_checked_before_starting(fields: dict[str, Any],
                                                        problem: str | None) -> None:
    found = directory_problem(Settings(**fields))
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_the_highest_role_of_the_groups_a_person_is_in() -> None:
    config = DirectoryConfig.of(Settings(**GOOD))
    assert config is not None
    assert role_of({"CN=V,DC=H", "cn=O,dc=h"}, config) == "operator"
    assert role_of({"cn=a,dc=h", "cn=V,dc=h"}, config) == "admin"
    assert role_of({"cn=V,dc=h"}, config) == "viewer"
    assert role_of({"cn=other,dc=h"}, config) is None
    only_viewers = DirectoryConfig.of(Settings(**{**GOOD, "console_ldap_operator_group": "",
                                                  "console_ldap_admin_group": ""}))
    assert only_viewers is not None and only_viewers.groups == (("viewer", "cn=V,dc=h"),)
    assert DirectoryConfig.of(Settings()) is None


def test_the_service_accounts_password_file_is_checked_before_starting(tmp_path: Path) -> None:
    secret = tmp_path / "ldap-password"
    settings = Settings(**GOOD, console_ldap_bind_dn="cn=svc",
                        console_ldap_bind_password_file=str(secret))
    found = startup_problem(settings)
    assert found is not None and "No such file" in found
    secret.write_text("\n")
    secret.chmod(0o600)
    found = startup_problem(settings)
    assert found is not None and "is empty" in found
    secret.write_text("the service password\n")
    secret.chmod(0o640)
    found = startup_problem(settings)
    assert found is not None and "chmod 600" in found
    secret.chmod(0o600)
    assert startup_problem(settings) is None
