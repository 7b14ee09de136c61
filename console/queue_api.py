"""The work queues under ``/api/queues`` (docs/queues.md, "At the console"): what the
``queue`` commands do, for a signed-in person, sent to the dispatcher through the tree's door
in that person's name (``account``, ``role``; ``operator`` is the account, never a name from
the body).

- Reading the queues and their items is every role's; opening an item (its inputs, outputs,
  history) is a view of patient data, recorded before it is sent (console/view_log.py).
- Adding a file: checked here first (workflow/queue_files.py, every refused row reported),
  then by the dispatcher against the items already in the queue; all or nothing, as
  ``queue add``.
- retry and skip need a role that may handle items (operator, admin), cancel one that may
  cancel them (admin): refused on the server otherwise (403 ``role_forbidden``, recorded).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from console.auth import ItemCanceller, ItemHandler, Me, Principal, require_json, state_of, who
from console.queue_views import (
    ItemDetail,
    ItemRow,
    QueueItems,
    QueueList,
    agent_row,
    item_detail,
    item_row,
    queue_row,
)
from console.state import ApiProblem, ConsoleState, problem_of
from console.view_log import record_view
from messages.base import Message
from messages.inputs import InputSpec
from messages.queue import (
    NAME_PATTERN,
    AddItems,
    GetItem,
    ItemCommand,
    ItemStateName,
    ListQueues,
    QueueCommandName,
    QueueReply,
    ShowQueue,
)
from transport.client import CallFailed
from workflow import queue_files

QUEUE = Path(pattern=NAME_PATTERN, description="A queue's name, as `python run.py queue list` "
                                               "shows it")
MAX_FILE_BYTES = 16 * 1024 * 1024
"""A file of the largest size a queue takes at once (its row limit) fits with room."""
MAX_ROWS_REPORTED = 1000
"""Refused rows sent back; ``refused`` says how many there were."""
ADD_TIMEOUT_S = 30.0
LIST_LIMIT = 1000


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ItemBody(_Body):
    reference: str = Field(min_length=1, max_length=128, description="The item's reference")


class FileBody(_Body):
    filename: str = Field("", max_length=255,
                          description="The file's name (``.jsonl``: JSON lines; else CSV)")
    content_base64: str = Field(max_length=(MAX_FILE_BYTES + 2) // 3 * 4,
                                description="The file's bytes, base64 (its encoding is "
                                            "found from them: UTF-8, with a BOM or not, "
                                            "or Windows-1252)")


class Added(BaseModel):
    queue: str
    added: int


class ItemChanged(BaseModel):
    """The item after the command, as the list shows it (no values: opening it shows
    them, recorded)."""

    command: QueueCommandName
    item: ItemRow


queue_api = APIRouter(prefix="/api/queues", dependencies=[Depends(who)], tags=["queues"],
                      responses={
                          400: {"description": "A refused file (items_refused: every "
                                               "refused row in detail.rows)"},
                          403: {"description": "role_forbidden"},
                          404: {"description": "Unknown queue or item"},
                          409: {"description": "The command does not apply to the item's "
                                               "state (not_allowed)"},
                          504: {"description": "The dispatcher did not answer in time"}})
Console = Annotated[ConsoleState, Depends(state_of)]


async def ask(console: ConsoleState, msg: Message, timeout_s: float = 5.0) -> QueueReply:
    """The dispatcher's answer to a ``queue.*`` message; its refusal as an ApiProblem."""
    try:
        reply = await console.link.call("dispatcher", msg, timeout_s=timeout_s, retries=0)
    except CallFailed as exc:
        raise problem_of(exc, "dispatcher") from None
    if not isinstance(reply, QueueReply):
        raise ApiProblem(502, "unexpected_reply", f"dispatcher answered {reply.type_name}")
    return reply


async def queue_list(console: ConsoleState) -> QueueList:
    reply = await ask(console, ListQueues())
    return QueueList(queues=[queue_row(q) for q in reply.queues],
                     agents=[agent_row(a) for a in reply.detail.get("agents", [])])


async def queue_items(console: ConsoleState, name: str, states: list[ItemStateName],
                      limit: int = LIST_LIMIT) -> QueueItems:
    reply = await ask(console, ShowQueue(queue=name, states=states, limit=limit))
    return QueueItems(queue=queue_row(reply.queues[0]),
                      items=[item_row(i) for i in reply.items],
                      matching=int(reply.detail.get("matching", len(reply.items))))


async def open_item(console: ConsoleState, request: Request, me: Principal, name: str,
                    reference: str) -> ItemDetail:
    """One item with its values, once its view is recorded (nothing is sent otherwise)."""
    reply = await ask(console, GetItem(queue=name, reference=reference))
    record_view(request, me, "queue_item", queue=name, reference=reference)
    return item_detail(reply.items[0])


@queue_api.get("")
async def list_queues(console: Console) -> QueueList:
    """Every queue with its items counted by state, and every agent with its pool and state
    (``queue list``)."""
    return await queue_list(console)


@queue_api.get("/{queue}")
async def show_queue(console: Console, queue: Annotated[str, QUEUE],
                     state: Annotated[list[ItemStateName], Query()] = [],  # noqa: B006
                     limit: Annotated[int, Query(ge=1, le=LIST_LIMIT)] = LIST_LIMIT,
                     ) -> QueueItems:
    """A queue's items, without their values (``queue show``): reference, state, agent,
    attempts, deadline, the names of the values read."""
    return await queue_items(console, queue, state, limit)


@queue_api.get("/{queue}/item")
async def get_item(console: Console, request: Request, me: Me,
                   queue: Annotated[str, QUEUE],
                   reference: Annotated[str, Query(min_length=1, max_length=128)],
                   ) -> ItemDetail:
    """One item with its inputs (a sensitive one masked), outputs and history (``queue
    item``). The view is recorded in the audit trail (console/view_log.py)."""
    return await open_item(console, request, me, queue, reference)


@queue_api.post("/{queue}/items", dependencies=[Depends(require_json)])
async def add_items(console: Console, queue: Annotated[str, QUEUE], body: FileBody,
                    me: ItemHandler) -> Added:
    """Add the items of a CSV or JSON lines file, all or none (``queue add``). A refused
    file adds nothing: 400 ``items_refused`` with ``problems`` (the file's) and ``rows``
    (each refused row: ``row``, ``line``, ``reference``, ``problems``)."""
    try:
        data = base64.b64decode(body.content_base64, validate=True)
    except (binascii.Error, ValueError):
        raise ApiProblem(400, "invalid_file", "content_base64 is not base64") from None
    if len(data) > MAX_FILE_BYTES:
        raise ApiProblem(413, "too_large", f"a file of at most {MAX_FILE_BYTES} bytes")
    queues = await ask(console, ListQueues())
    found = next((q for q in queues.queues if q.get("name") == queue), None)
    if found is None:
        raise ApiProblem(404, "not_found", f"no queue {queue}", {"queue": queue})
    declared = [InputSpec.model_validate(i) for i in found.get("inputs", [])]
    # A large file takes a while to check: not on the event loop.
    parsed = await asyncio.to_thread(queue_files.parse, data, declared, body.filename)
    if not parsed.ok:
        raise ApiProblem(400, "items_refused", (
            f"{body.filename or 'the file'}: refused, nothing was added"), {
            "queue": queue, "problems": parsed.problems, "refused": len(parsed.rows),
            "rows": parsed.rows[:MAX_ROWS_REPORTED]})
    reply = await ask(console, AddItems(queue=queue, items=parsed.items,
                                        operator=me.account, **me.by()),
                      timeout_s=ADD_TIMEOUT_S)
    return Added(queue=queue, added=int(reply.detail.get("added", len(parsed.items))))


async def _command(console: ConsoleState, me: Principal, queue: str, reference: str,
                   command: Literal["retry", "skip", "cancel"]) -> ItemChanged:
    assert me.account is not None  # a role that may change items is a person's
    reply = await ask(console, ItemCommand(queue=queue, reference=reference, command=command,
                                           operator=me.account, **me.by()))
    return ItemChanged(command=command, item=item_row(reply.items[0]))


@queue_api.post("/{queue}/retry", dependencies=[Depends(require_json)])
async def retry(console: Console, queue: Annotated[str, QUEUE], body: ItemBody,
                me: ItemHandler) -> ItemChanged:
    """Try the item again (a new replay; operator, admin)."""
    return await _command(console, me, queue, body.reference, "retry")


@queue_api.post("/{queue}/skip", dependencies=[Depends(require_json)])
async def skip(console: Console, queue: Annotated[str, QUEUE], body: ItemBody,
               me: ItemHandler) -> ItemChanged:
    """The item was handled outside: no replay will run it (operator, admin)."""
    return await _command(console, me, queue, body.reference, "skip")


@queue_api.post("/{queue}/cancel", dependencies=[Depends(require_json)])
async def cancel(console: Console, queue: Annotated[str, QUEUE], body: ItemBody,
                 me: ItemCanceller) -> ItemChanged:
    """Stop the item, its replay too (admin)."""
    return await _command(console, me, queue, body.reference, "cancel")


__all__ = ["queue_api", "queue_items", "queue_list"]
