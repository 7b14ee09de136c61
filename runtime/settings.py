"""Settings shared by every process of the tree: endpoints, heartbeating, data directory.

Precedence, highest first: command-line flags (passed as overrides), ``LEA_*`` environment
variables, the TOML file named by ``--config`` / ``LEA_CONFIG``, then the defaults below.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from runtime.liveness import BEACON_FD_ENV
from runtime.setting_names import OTHER_NAMES, unknown_settings


class Settings(BaseSettings):
    """Every setting can be set from the environment as ``LEA_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="LEA_", extra="forbid", frozen=True)

    mdp_endpoint: str = "tcp://127.0.0.1:5555"
    bus_in_endpoint: str = "tcp://127.0.0.1:5556"
    bus_out_endpoint: str = "tcp://127.0.0.1:5557"
    data_dir: Path = Path("var")
    heartbeat_interval_ms: int = Field(1000, ge=50, le=60_000)
    heartbeat_liveness: int = Field(3, ge=2, le=10)
    request_expiry_s: float = Field(30.0, gt=0)
    max_message_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    log_level: str = "INFO"
    # Supervision (docs/architecture.md, "Processes").
    supervisor_strategy: str = Field(
        "one_for_one", pattern="^(one_for_one|rest_for_one|one_for_all)$"
    )
    restart_intensity: int = Field(5, ge=0)
    restart_period_s: float = Field(30.0, gt=0)
    shutdown_timeout_s: float = Field(5.0, gt=0)
    beacon_timeout_s: float = Field(3.0, gt=0)
    # CURVE (docs/protocol.md): a second MDP listener for agents outside, with an allow-list of
    # their public keys; the loopback mdp_endpoint stays as it is for the local actors.
    curve: bool = False
    curve_endpoint: str = "tcp://0.0.0.0:5558"
    keys_dir: str = ""  # "" = <data_dir>/keys (see transport/curve_keys.py for its layout)
    # The keyring the audit trail's screenshots are encrypted with (actors/audit_log/
    # image_keys.py); "" = <data_dir>/keys/image-keys.json. Best outside the data directory.
    image_keyring: str = ""
    # The tree's own door (broker/tree_door.py): an ipc:// socket in a directory only the
    # tree's user may enter; the actors' services are served from it only.
    # "" = ipc://<tmp>/lea-<uid>-<key of data_dir>/tree.sock (tree_mdp_endpoint says why)
    tree_endpoint: str = Field("", pattern=r"^(ipc://.+)?$")
    # The people's door (broker/control_door.py): an ipc:// socket every local account may
    # reach, where the broker learns each caller's uid from the kernel; the commands that
    # change or delete are taken from it only, from the tree's user or a member of
    # control_group ("" = the tree's user alone). "" = ipc://<tmp>/lea-ctl-<uid>-<key>/
    # control.sock (control_mdp_endpoint).
    control_endpoint: str = Field("", pattern=r"^(ipc://.+)?$")
    control_group: str = Field("", max_length=64, pattern=r"^([A-Za-z_][A-Za-z0-9_.-]*)?$")
    # The supervisor console (console/): a web page on console_host:console_port (0 = no
    # console). Beyond loopback it needs console_token (console/access.py says why and how).
    console_host: str = "127.0.0.1"
    console_port: int = Field(8765, ge=0, le=65535)
    console_token: str = Field("", max_length=512)
    # Operator accounts (console/accounts.py): how long a sign-in lasts, and how many failed
    # sign-ins an account / a client address may have within the window before it waits.
    console_session_lifetime_s: float = Field(8 * 3600.0, ge=1, le=7 * 24 * 3600)
    console_login_window_s: float = Field(900.0, ge=1)
    console_login_max_failures: int = Field(5, ge=1)
    console_login_max_failures_per_address: int = Field(20, ge=1)
    # TLS (console/tls.py): the certificate chain and its private key, PEM files; beyond
    # loopback the console needs them, or console_behind_tls_proxy when a proxy of the
    # hospital's ends TLS in front of it. console_server_names: the names (comma-separated)
    # browsers reach it under, checked against every request's Host (console/access.py).
    console_tls_cert: str = ""
    console_tls_key: str = ""
    console_behind_tls_proxy: bool = False
    console_server_names: str = Field("", max_length=2000)
    # Whom a person without an account asks (shown on the sign-in page).
    console_help_contact: str = Field("", max_length=300)
    # Sign-in with the hospital's directory (console/directory.py); "" = local accounts only.
    console_ldap_url: str = Field("", pattern=r"^((ldap|ldaps)://.*)?$")
    console_ldap_start_tls: bool = False
    console_ldap_ca_file: str = ""
    console_ldap_bind_dn: str = ""
    console_ldap_bind_password_file: str = ""
    console_ldap_user_base: str = ""
    console_ldap_user_filter: str = "(uid={name})"
    console_ldap_enabled_filter: str = "(objectClass=*)"
    console_ldap_member_filter: str = "(|(member={dn})(uniqueMember={dn}))"
    console_ldap_viewer_group: str = ""
    console_ldap_operator_group: str = ""
    console_ldap_admin_group: str = ""
    console_ldap_timeout_s: float = Field(5.0, gt=0, le=60)
    # The dispatcher's state and the audit trail in PostgreSQL (actors/dispatcher/store/postgres.py,
    # actors/audit_log/store/postgres.py) instead of their SQLite files in data_dir; "" = SQLite,
    # the embedded default (docs/operations.md).
    database_url: str = Field("", pattern=r"^((postgresql|postgres)://.*)?$")
    # A broker pair (docs/operations.md, "A broker pair"; broker/binary_star.py): this
    # broker's role, where it publishes its state and where its peer broker publishes its own.
    # "" = a broker alone.
    broker_role: str = Field("", pattern="^(|primary|backup)$")
    broker_state_endpoint: str = ""
    broker_peer_state_endpoint: str = ""
    # Where the peers (agents, commands / the actors) go when the broker at mdp_endpoint
    # (tree_endpoint) does not serve: the other broker of the pair. "" = one broker.
    mdp_backup_endpoint: str = ""
    tree_backup_endpoint: str = Field("", pattern=r"^(ipc://.+)?$")
    # The pool of workstations an agent serves (``run.py agent --pool``): the work queues of
    # that pool give it their items (docs/queues.md).
    agent_pool: str = Field("default", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

    @property
    def heartbeat_interval_s(self) -> float:
        return self.heartbeat_interval_ms / 1000.0

    @property
    def heartbeat_expiry_s(self) -> float:
        return self.heartbeat_interval_s * self.heartbeat_liveness

    @property
    def tree_mdp_endpoint(self) -> str:
        """Where the tree's own processes (the actors) reach the broker. By default a socket in
        a directory of this user's under the system's temporary folder, named after the data
        directory (one door per tree): not in the data directory itself, which may be on a
        filesystem that holds no sockets (FUSE, network shares) or too deep for a socket
        path."""
        if self.tree_endpoint:
            return self.tree_endpoint
        return self._door("lea", "tree.sock")

    @property
    def control_mdp_endpoint(self) -> str:
        """Where people's commands reach the broker (the command line): a socket in a
        directory every local account may enter (broker/control_door.py). Its default name
        has no uid in it: other accounts, whose uid differs, must find the same door from the
        same data directory."""
        if self.control_endpoint:
            return self.control_endpoint
        return self._door("lea-ctl", "control.sock", with_uid=False)

    def _door(self, prefix: str, name: str, with_uid: bool = True) -> str:
        key = hashlib.sha256(os.fsencode(self.data_dir.resolve())).hexdigest()[:16]
        if not with_uid:
            folder = f"{prefix}-{key}"
        elif sys.platform == "win32":
            folder = f"{prefix}-w-{key}"
        else:
            folder = f"{prefix}-{os.getuid()}-{key}"
        return f"ipc://{Path(tempfile.gettempdir()) / folder / name}"

    @property
    def mdp_endpoints(self) -> tuple[str, ...]:
        """The brokers a peer may use, in the order it tries them."""
        return _with_backup(self.mdp_endpoint, self.mdp_backup_endpoint)

    @property
    def tree_mdp_endpoints(self) -> tuple[str, ...]:
        """The tree's doors of the brokers, in the order the actors try them."""
        return _with_backup(self.tree_mdp_endpoint, self.tree_backup_endpoint)

    @property
    def keys_path(self) -> Path:
        return Path(self.keys_dir) if self.keys_dir else self.data_dir / "keys"


def _with_backup(endpoint: str, backup: str) -> tuple[str, ...]:
    return (endpoint, backup) if backup and backup != endpoint else (endpoint,)


class UnknownSetting(ValueError):
    """The environment names a setting nothing reads, that looks like one that is read."""


def known_settings() -> frozenset[str]:
    """Every ``LEA_*`` / ``RPA_*`` variable a process of ours reads (runtime/setting_names.py)."""
    return OTHER_NAMES | {f"LEA_{name.upper()}" for name in Settings.model_fields}


def check_environment() -> None:
    """Raise :class:`UnknownSetting` for a misspelt setting in the environment; print a
    warning for an unknown one that looks like none (once: not again in the supervisor's
    children, which inherit the same environment)."""
    refused, warned = unknown_settings(os.environ, known_settings())
    if refused:
        raise UnknownSetting("; ".join(refused))
    if not os.environ.get(BEACON_FD_ENV):
        for line in warned:
            print(f"warning: {line}", file=sys.stderr)


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings from defaults, then the TOML file, then ``LEA_*`` env vars, then ``overrides``;
    :func:`check_environment` first."""
    check_environment()
    path = config_file or os.environ.get("LEA_CONFIG")
    file_values: dict[str, Any] = {}
    if path:
        with open(path, "rb") as fh:
            file_values = tomllib.load(fh).get("lea", {})
    from_env = Settings()
    env_set = {
        name for name in Settings.model_fields if f"LEA_{name.upper()}" in os.environ
    }
    merged = {k: v for k, v in file_values.items() if k not in env_set}
    merged.update({k: getattr(from_env, k) for k in env_set})
    merged.update({k: v for k, v in overrides.items() if v is not None})
    return Settings.model_validate(merged) if merged else from_env


def settings_or_exit(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """:func:`load_settings` for a process's start: a setting it cannot take (a bad value, a
    misspelt name, an unreadable file) stops the process with exit code 2, naming it."""
    try:
        return load_settings(config_file, **overrides)
    except (OSError, ValueError) as exc:
        print(f"error: invalid settings: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def settings_env(settings: Settings) -> dict[str, str]:
    """``LEA_*`` variables that hand ``settings`` to a child process."""
    return {
        f"LEA_{name.upper()}": str(getattr(settings, name)) for name in Settings.model_fields
    }
