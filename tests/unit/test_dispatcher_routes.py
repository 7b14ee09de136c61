"""The dispatcher's table of requests (actors/dispatcher/routes.py) agrees with who may send
them: the requests applied once per envelope are the people's controls, and every control
and tree request is served."""

from __future__ import annotations

from actors.dispatcher.process import DispatcherActor
from actors.dispatcher.routes import ROUTES, Applies


def test_the_requests_applied_once_are_the_control_requests() -> None:
    once = {kind for kind, route in ROUTES.items() if route.applies is Applies.ONCE}
    assert once == set(DispatcherActor.control_requests)


def test_every_control_and_tree_request_has_a_route() -> None:
    assert DispatcherActor.control_requests | DispatcherActor.tree_requests <= set(ROUTES)
