"""Who may change or delete, among the callers that are not the tree (docs/architecture.md,
"Who may do what"): the decisions are pure; the account and group look-ups are at the end.

A person reaches the broker through the people's door (broker/control_door.py), where the
kernel gives the broker their uid. A command that changes or deletes is taken from the tree's
own user or from a member of ``control_group``; from any other account, or from the plain
loopback endpoint (where nothing says who calls), it is refused and recorded.

Fields that name who acts are the tree's to fill: ``account`` and ``role`` come only from the
console (a process of the tree, which signed the person in), and ``os_user`` is what the door
proved, never what the message says.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

CLAIMS_OF_THE_CONSOLE = ("account", "role")
"""Fields only the console may set (it alone signs people in)."""


def control_refusal(uid: int, name: str, tree_uid: int, group: str,
                    groups: Collection[str]) -> str | None:
    """Why OS account ``uid`` (``name``, member of ``groups``) may not change or delete, or
    None if it may: the tree's own user always may, the members of ``group`` too."""
    if uid == tree_uid:
        return None
    if not group:
        return (f"OS user {name!r} (uid {uid}) may not change replays or the audit trail: "
                "only the server's own account may, as no control_group is set "
                "(LEA_CONTROL_GROUP, docs/operations.md)")
    if group not in groups:
        return (f"OS user {name!r} (uid {uid}) is not in the group {group!r} "
                "(LEA_CONTROL_GROUP) whose members may change replays or the audit trail")
    return None


def claim_problem(fields: dict[str, Any], proven_user: str) -> str | None:
    """Why a person's message claims what is not theirs to claim, or None. ``fields``: the
    message's values (``model_dump``)."""
    for name in CLAIMS_OF_THE_CONSOLE:
        if fields.get(name) is not None:
            return (f"{name!r} is set by the console only (a person signed in there); "
                    "a command from the command line is recorded under its OS user")
    claimed = fields.get("os_user")
    if claimed is not None and claimed != proven_user:
        return (f"os_user {str(claimed)[:64]!r} is not the OS user the server saw calling "
                f"({proven_user!r})")
    return None


# Look-ups (the system's account database) -------------------------------------------------

def account_name(uid: int) -> str:
    """The name of OS account ``uid`` (``uid N`` if it has none)."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def group_names(uid: int) -> frozenset[str]:
    """The groups OS account ``uid`` belongs to (primary and supplementary), by name."""
    import grp
    import pwd

    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return frozenset()
    names = set()
    for gid in os.getgrouplist(entry.pw_name, entry.pw_gid):
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return frozenset(names)
