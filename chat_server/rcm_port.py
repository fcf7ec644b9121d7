"""The chat server's port to its site's RCM server: the API it codes against, typed.

``rcm.client.RcmClient`` implements ``RcmPort``; tests use an in-process double
of it (tests/chat_server/chat_fake_rcm.py) that raises the same exceptions and
yields the same events, so the chat server dispatches on their types. ``send``
turns RCM's refusals into the chat protocol's (``try_again``, ``unavailable``,
``rejected``).
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from contracts.mission import Mission
from contracts.precedence import DEFAULT, Precedence
from rcm.client import (
    Accepted,
    Delivery,
    Latest,
    Missing,
    RcmBackpressure,
    RcmClient,
    RcmError,
    RcmUnavailable,
    StatusChange,
    socket_path,
)
from rcm.wire.local import Confine

from .protocol import ErrorCode as E
from .protocol import Refusal, unavailable

__all__ = ["RcmPort", "RcmConnect", "send", "connect_local", "Accepted", "Delivery", "Missing", "StatusChange",
           "Latest", "RcmError", "RcmUnavailable"]

Event = Delivery | StatusChange | Missing | Latest


class RcmPort(Protocol):
    incarnation: int
    statuses: dict[str, str]
    via: dict[str, str | None]          # peer -> next hop when only relays reach it

    async def send(self, payload: bytes, dests: Sequence[str] | None = None, *,
                   precedence: str = DEFAULT, expires_at: float | None = None,
                   within: Confine = True) -> Accepted: ...
    async def publish(self, key: bytes, payload: bytes, *, expires_at: float) -> None: ...
    async def will(self, payload: bytes | None, dests: Sequence[str] | None = None) -> bool: ...
    def events(self) -> AsyncIterator[Event]: ...
    def backlog(self) -> int: ...           # events received and not yet taken from events()
    def oldest_request(self) -> int | None: ...   # which request has waited longest for its answer (None: none)
    async def ack(self, n: int) -> None: ...
    async def stats(self) -> dict[str, Any]: ...
    async def close(self) -> None: ...


RcmConnect = Callable[[tuple[int, int] | None], Awaitable[RcmPort]]   # since -> a connected port


def connect_local(mission: Mission, site: str) -> RcmConnect:
    """Connect to the site's RCM server on its local socket."""
    async def connect(since: tuple[int, int] | None) -> RcmPort:
        return await RcmClient.connect(socket_path(mission, site), name="chat", since=since)
    return connect


async def send(rcm: RcmPort | None, payload: bytes, dests: Sequence[str] | None,
               precedence: Precedence = Precedence.ROUTINE, expires_at: float | None = None,
               within: Confine = True) -> Accepted:
    """Hand a payload to RCM at ``precedence`` (paced links write FLASH first; urgent messages are
    delivered on arrival), void after ``expires_at`` (Unix seconds; None: never); Refusal in the chat
    protocol's words if it does not take it.

    ``within``: how far a send to a subset of the sites may travel (``rcm.wire.local.Confine``): content
    (a labeled message, an acknowledgement of one) keeps the default, only among its destinations, which are
    the sites cleared for it (``labeling.py``); a labeled room's definition may cross every site cleared for
    its label; control data that is no secret of its destinations (rosters, receipts, requests) goes
    ``within=False``, so that it never waits for a path through its destinations alone."""
    if rcm is None:
        raise unavailable()
    extras: dict[str, Any] = {}                      # RCM's defaults are left out of its request
    if precedence is not Precedence.ROUTINE:
        extras["precedence"] = precedence.value
    if expires_at is not None:
        extras["expires_at"] = expires_at
    if within is not True and dests is not None:
        extras["within"] = within
    try:
        return await rcm.send(payload, dests=dests, **extras)
    except RcmBackpressure as e:
        raise Refusal(E.TRY_AGAIN, "the inter-site buffers are full; try again shortly") from e
    except RcmUnavailable as e:
        raise unavailable() from e
    except RcmError as e:
        raise Refusal(E.REJECTED, f"RCM refused the message: {e}") from e
