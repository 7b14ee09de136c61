"""A real, throwaway OpenLDAP server for the tests of sign-in with a directory.

Debian's ``slapd`` (installed by scripts/test, its own instance left stopped): a config of
ours (``slapd -f``) with an MDB database in a temporary folder, listening on a free port of
127.0.0.1, access rules as a hospital would set them (a person binds with their password and
reads nothing; the console's service account reads people and groups), and the ppolicy
module for ``pwdAccountLockedTime``, OpenLDAP's way of disabling an account. Entries are
added and changed with ``ldapadd`` / ``ldapmodify`` as the directory's administrator. One
server per test session (:func:`slapd_server`), stopped and removed at the end.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SLAPD = Path("/usr/sbin/slapd")
SUFFIX = "dc=hospital,dc=test"
ADMIN_DN = f"cn=admin,{SUFFIX}"
ADMIN_PASSWORD = "the directory admin's password"
SERVICE_DN = f"cn=lea-console,ou=services,{SUFFIX}"
SERVICE_PASSWORD = "the console service account's password"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"

_CONFIG = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload ppolicy
pidfile {dir}/slapd.pid
argsfile {dir}/slapd.args

database mdb
maxsize 16777216
suffix "{suffix}"
rootdn "{admin}"
rootpw "{admin_password}"
directory {dir}/db
access to attrs=userPassword by anonymous auth by * none
access to * by dn.exact="{service}" read by * none
"""


def person_dn(uid: str) -> str:
    return f"uid={uid},{PEOPLE}"


def group_dn(cn: str) -> str:
    return f"cn={cn},{GROUPS}"


class Slapd:
    """One slapd of our own: :attr:`url`, :meth:`ldif` to add / change entries."""

    def __init__(self, folder: Path) -> None:
        from tests.conftest import free_port  # (conftest imports the fixtures below)

        self.dir = folder
        (folder / "db").mkdir(parents=True)
        self.port = free_port()
        self.url = f"ldap://127.0.0.1:{self.port}/"
        self.conf = folder / "slapd.conf"
        self.conf.write_text(_CONFIG.format(dir=folder, suffix=SUFFIX, admin=ADMIN_DN,
                                            admin_password=ADMIN_PASSWORD,
                                            service=SERVICE_DN))
        self.log = folder / "slapd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it (in the foreground, ``-d``), and wait until it answers."""
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([str(SLAPD), "-f", str(self.conf), "-h", self.url,
                                          "-d", "256"], stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"slapd exited: {self.log.read_text()[-2000:]}")
            probe = subprocess.run(["ldapsearch", "-x", "-H", self.url, "-D", ADMIN_DN, "-w",
                                    ADMIN_PASSWORD, "-b", "", "-s", "base"],
                                   capture_output=True, timeout=10, check=False)
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"slapd did not answer: {self.log.read_text()[-2000:]}")

    def ldif(self, text: str, *, change: bool = False) -> None:
        """``ldapadd`` (or ``ldapmodify`` with ``change``) of ``text`` as the administrator."""
        tool = "ldapmodify" if change else "ldapadd"
        done = subprocess.run([tool, "-x", "-H", self.url, "-D", ADMIN_DN, "-w",
                               ADMIN_PASSWORD], input=text.encode(), capture_output=True,
                              timeout=30, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stderr.decode()}")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


BASE_LDIF = f"""\
dn: {SUFFIX}
objectClass: dcObject
objectClass: organization
o: Hospital
dc: hospital

dn: ou=services,{SUFFIX}
objectClass: organizationalUnit
ou: services

dn: {SERVICE_DN}
objectClass: organizationalRole
objectClass: simpleSecurityObject
cn: lea-console
userPassword: {SERVICE_PASSWORD}

dn: {PEOPLE}
objectClass: organizationalUnit
ou: people

dn: {GROUPS}
objectClass: organizationalUnit
ou: groups
"""


def person_ldif(uid: str, password: str) -> str:
    return (f"dn: {person_dn(uid)}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid}\n"
            f"sn: {uid}\nuserPassword: {password}\n")


def group_ldif(cn: str, members: list[str]) -> str:
    # groupOfNames needs a member: the group itself stands in while it has nobody.
    lines = [f"member: {person_dn(m)}" for m in members] or [f"member: {group_dn(cn)}"]
    return f"dn: {group_dn(cn)}\nobjectClass: groupOfNames\ncn: {cn}\n" + "\n".join(lines) + "\n"


@contextlib.contextmanager
def slapd(parent: Path) -> Iterator[Slapd]:
    """A started server with its base entries, removed on exit; skips where slapd is
    absent."""
    if not SLAPD.exists() or shutil.which("ldapadd") is None:
        pytest.skip("OpenLDAP is not installed (Debian's slapd and ldap-utils; scripts/test "
                    "installs them)")
    server = Slapd(Path(tempfile.mkdtemp(prefix="slapd-", dir=parent)))
    try:
        server.start()
        server.ldif(BASE_LDIF)
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def slapd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    """One directory server for the session's tests (each adds people of its own)."""
    with slapd(tmp_path_factory.mktemp("ldap")) as server:
        yield server
