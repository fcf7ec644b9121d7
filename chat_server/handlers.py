"""Client frames, from WebSocket and IRC sessions alike: parsed, authorised, answered.

``ClientFrames.handle`` parses one frame (protocol.py), refuses anything but
``hello`` before a login, and dispatches by type to the handler below; a
``Refusal`` from any layer becomes an ``error`` frame naming the problem, and
the connection stays open. Room requests go to the chat core (core.py), logins
to logins.py, says to the say pipeline (sending.py).

Every change a request makes to the site's database is a step of actions
(actions.py) the server applies in one transaction (``ChatServer.apply``): a
join's membership and read marker, a read marker, a session token, a logout.
The handlers read the database directly only for plain queries that change
nothing: a welcome's unread counts and read markers, a resume's pages (paced
by the client's reading), and the message an ``acknowledge`` names. Every
task they start (a say, a search's answer) is the server's (tasks.py).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from . import positions, rcm_port
from . import protocol as P
from .accounts import Roles
from .core_requests import Say
from .payload import Acknowledgement, RoomDefinition, encode_payload
from .protocol import ErrorCode as E
from .protocol import FrameError, Refusal, Request
from .search import Hit, QueryError, fts_query
from .sending import Draft
from .sessions import Session
from .store import storage_trouble
from .urgent import UrgentPolicy

if TYPE_CHECKING:
    from .server import ChatServer

log = logging.getLogger("chat_server")


def failed(e: Exception, what: str, remote: object, reply_to: str | None = None) -> dict[str, Any]:
    """The error frame for a request that failed inside the server, logged: the site's disk, or a bug.

    A disk that cannot be written (full, read-only) is no bug: ``unavailable``, with what is wrong, so the
    user knows to try again later (a say tried again with its ``client_id`` is never sent twice).
    """
    trouble = storage_trouble(e)
    if trouble is not None:
        log.error("cannot write to the disk for %s from %s: %s", what, remote, trouble)
        return P.error(E.UNAVAILABLE, f"the site cannot write to its disk ({trouble}); try again later", reply_to)
    log.error("internal error on %s from %s", what, remote, exc_info=e)
    return P.error(E.INTERNAL, "internal error; the server log has details", reply_to)
MAX_SAYS_IN_FLIGHT = 64       # per connection; then the server stops reading that client for a while
SEARCH_LIMIT = 20             # search results by default ...
SEARCH_MAX = 100              # ... and at most
ACKNOWLEDGING_MAX = 10_000    # acknowledgements on their way remembered (to answer a repeat without sending)


class ClientFrames:
    def __init__(self, server: ChatServer) -> None:
        self.server = server
        s = server.settings
        self.urgent = UrgentPolicy(s.flash_role, s.immediate_role, s.urgent_per_minute, s.urgent_burst,
                                   Roles(server.store.db).of)
        self._handlers: dict[str, Callable[[Session, Request], Awaitable[None]]] = {
            "hello": self._hello, "join": self._join, "leave": self._leave, "rooms": self._rooms,
            "history": self._history, "create": self._create, "logout": self._logout, "directory": self._directory,
            "search": self._search, "mark_read": self._mark_read, "acknowledge": self._acknowledge,
            "position": self._position, "positions": self._positions}
        self._acknowledging: dict[tuple[str, str], asyncio.Task[str]] = {}   # (user, msg_id) sent, not back yet

    @property
    def says(self) -> frozenset[asyncio.Task[Any]]:
        """Every say in flight (the server's tasks that ``stop`` lets finish)."""
        return self.server.tasks.finishing

    def admit(self, session: Session) -> bool:
        """The rate limits of a client's frames; False (and closed) when the client or its user floods."""
        s = self.server.settings
        if not session.take_token():
            session.close(1008, f"flood: more than {s.rate_limit_burst} frames in a burst "
                                f"(limit {s.rate_limit_frames:g}/s)")
            return False
        if session.user is not None and not self.server.sessions.take_user_token(session.user):
            session.close(1008, f"flood: user {session.user} sent more than {s.user_rate_limit_burst} frames in a "
                                f"burst over all its connections (limit {s.user_rate_limit_frames:g}/s)")
            return False
        return True

    async def pace_says(self, session: Session) -> None:
        """Stop reading a client with too many says in flight until one is answered (TCP pushes back)."""
        if len(session.says) >= MAX_SAYS_IN_FLIGHT:
            await asyncio.wait(set(session.says), return_when=asyncio.FIRST_COMPLETED)

    async def handle(self, session: Session, text: str) -> None:
        """One client frame: a reply, or an ``error`` frame naming the problem; the connection stays open."""
        req: Request | None = None
        try:
            req = P.parse_client_frame(text, self.server.settings.max_text_bytes, self.server.settings.max_members)
            if req.type != "hello" and session.user is None:
                raise FrameError(E.NOT_AUTHENTICATED, f"{req.type}: send hello first", req.reply_to)
            if req.type == "say":
                self._start_say(session, req)
            else:
                await self._handlers[req.type](session, req)
        except Refusal as e:
            reply_to = e.in_reply_to if isinstance(e, FrameError) else req.reply_to if req is not None else None
            session.send(P.error(e.code, e.message, reply_to))
        except Exception as e:
            session.send(failed(e, "a frame", session.remote, req.reply_to if req is not None else None))

    async def _hello(self, session: Session, req: Request) -> None:
        f = req.fields
        if session.user is not None:
            raise Refusal(E.ALREADY_AUTHENTICATED, f"already logged in as {session.user}")
        user = f["user"]
        self._check_session_slot(user)
        token: str | None = None
        if "password" in f:
            token, stored = await self.server.logins.with_password(user, f["password"], session.remote)
            self.server.apply([stored])
            digest = stored.digest
        else:
            digest = self.server.logins.with_token(user, f["session"], session.remote)
        if session.closed:
            return
        await self._welcome(session, user, digest, token, req.id)
        if "last_n" in f:
            await self._replay(session, f["last_n"], req)
        else:
            self.server.sessions.register(session, self.server.core.rooms.rooms_of(user))

    async def verified_login(self, session: Session, user: str, rid: Any) -> None:
        """Log in a client its front end authenticated itself (a TAK client by its certificate or, in labs,
        its callsign: chat_server/tak): the session slots, welcome and registration of ``hello``, with no
        password and no session token. A refusal is an ``error`` frame, as for ``hello``."""
        try:
            if session.user is not None:
                raise Refusal(E.ALREADY_AUTHENTICATED, f"already logged in as {session.user}")
            if self.server.store.password_hash(user) is None:
                raise Refusal(E.AUTH_FAILED, f"{user} is no account at site {self.server.site}")
            self._check_session_slot(user)
            await self._welcome(session, user, None, None, rid)
            self.server.sessions.register(session, self.server.core.rooms.rooms_of(user))
        except Refusal as e:
            session.send(P.error(e.code, e.message, rid))

    async def _welcome(self, session: Session, user: str, digest: str | None, token: str | None, rid: Any) -> None:
        """The user is who it says: take a session slot and send the ``welcome``."""
        self._check_session_slot(user)
        session.user, session.token_digest = user, digest
        rooms = sorted(self.server.core.rooms.rooms_of(user))
        welcome = P.welcome(site=self.server.site, user=user, sites=self.server.site_statuses(), rooms=rooms,
                            session=token, n=self.server.journal_n, presence=self.server.presence_snapshot())
        welcome["unread"], welcome["mentions"] = self.server.store.unread(user, rooms, self.server.core.reader(user))
        welcome["via"] = dict(self.server.core.via)
        if self.server.core.chat_gone:      # sites RCM reaches whose chat server is gone (site_status's chat_down)
            welcome["chat_down"] = sorted(self.server.core.chat_gone)
        welcome["missing"] = self.server.core.losses.still_missing()
        welcome["read"] = {r: order for r in rooms if (order := self.server.store.read_marker(user, r)) is not None}
        labels = self.server.core.labels
        if labels.enabled:          # (labeled missions: the user's clearance, and the scheme for banners, composers)
            welcome["clearance"] = self.server.core.rooms.clearance(user).to_json()
            welcome["labels"] = labels.scheme_json()
        session.send(P.with_id(welcome, rid))

    def _check_session_slot(self, user: str) -> None:
        if self.server.sessions.count(user) >= self.server.settings.max_sessions_per_user:
            raise Refusal(E.LIMIT, f"{user} already has {self.server.settings.max_sessions_per_user} sessions open "
                                   "at this site (max_sessions_per_user)")

    async def _replay(self, session: Session, after_n: int, req: Request) -> None:
        """What a resumed session missed since ``after_n``, paced by the client's reading, then live.

        Pages go out through the WebSocket writer, which waits while the client is behind, so a long
        backlog never overflows the outbound queue (audit row 6). The session is registered for live
        deliveries in the same step as the query that found nothing more: no delivery falls between."""
        s = self.server.settings
        page = max(1, min(200, s.outbound_queue_bytes // (4 * (s.max_text_bytes + 1024))))
        sent = 0
        while not session.closed:
            rooms = self.server.core.rooms.rooms_of(session.user or "")
            msgs, _ = self.server.store.since_n(sorted(rooms), after_n, page)
            may_read = self.server.core.reader(session.user or "")
            if may_read is not None and msgs:
                after_n = msgs[-1].n
                msgs = [m for m in msgs if may_read(m.label)]
                if not msgs:
                    continue
            if not msgs or sent >= s.resume_max:
                if msgs:
                    session.send(P.error(E.LIMIT, f"more than {s.resume_max} messages were missed; "
                                                  "use history to fetch older ones", req.reply_to))
                self.server.sessions.register(session, rooms)
                return
            for m in msgs:
                await session.send_paced(m.frame(self.server.clock()))
                after_n = m.n
            sent += len(msgs)

    async def _logout(self, session: Session, req: Request) -> None:
        """Revoke this login's session token (``all``: every one of the user's at this site) and close."""
        user, everywhere = session.user, bool(req.fields.get("all"))
        assert user is not None
        self.server.apply(self.server.logins.revoke(user, session.token_digest, everywhere))
        log.info("%s logged out%s from %s", user, " everywhere" if everywhere else "", session.remote)
        frame = P.logged_out(everywhere)
        session.send(P.with_id(dict(frame), req.id))
        session.close(1000, "logged out")
        for other in self.server.sessions.of_user(user):
            if everywhere or other.token_digest == session.token_digest:
                other.send(frame)
                other.close(1000, "logged out")

    async def _join(self, session: Session, req: Request) -> None:
        user, room = session.user, req.fields["room"]
        assert user is not None
        actions, frame = self.server.core.join(user, room, self.server.monotonic())
        self.server.apply(actions)
        session.send(P.with_id(dict(frame), req.id))
        for other in self.server.sessions.of_user(user):
            if other is not session:
                other.send(frame)

    async def _leave(self, session: Session, req: Request) -> None:
        user, room = session.user, req.fields["room"]
        assert user is not None
        self.server.apply(self.server.core.leave(user, room))
        frame = P.left(room)
        session.send(P.with_id(dict(frame), req.id))
        for other in self.server.sessions.of_user(user):
            if other is not session:
                other.send(frame)

    async def _rooms(self, session: Session, req: Request) -> None:
        assert session.user is not None
        f = req.fields
        frame = self.server.core.room_list(session.user, self.server.sessions.online(), f.get("after", ""),
                                    f.get("limit", self.server.settings.rooms_page))
        session.send(P.with_id(frame, req.id))

    async def _history(self, session: Session, req: Request) -> None:
        assert session.user is not None
        f = req.fields
        self.server.core.rooms.check_access(session.user, f["room"], "history")
        frame = self.server.history.page(f["room"], f.get("limit"), f.get("before"), f.get("after_n"),
                                         f.get("around"), self.server.core.reader(session.user))
        session.send(P.with_id(frame, req.id))

    async def _directory(self, session: Session, req: Request) -> None:
        """Public rooms known here (from every site's traffic) and the user's private ones, a page at a time."""
        assert session.user is not None
        f = req.fields
        session.reads_directory = True          # from now on, what changes is pushed (directory_update)
        frame = self.server.core.directory(session.user, f.get("after", ""),
                                           f.get("limit", self.server.settings.rooms_page))
        session.send(P.with_id(frame, req.id))

    async def _position(self, session: Session, req: Request) -> None:
        """A unit's position, reported by a local user (positions.py): to RCM's latest-wins class. A user
        reports for itself (the default unit) or for a unit that is no other account of this site."""
        assert session.user is not None
        server = self.server
        unit = req.fields.get("unit", session.user)
        if unit != session.user and server.store.password_hash(unit) is not None:
            raise Refusal(E.FORBIDDEN, f"position: {unit!r} is another user of this site; report your own "
                                       "position or a unit's")
        now = server.clock()
        report = positions.from_request(server.site, session.user, req.fields, now, server.settings.position_max_age)
        await server.positions.publish(report)
        if req.id is not None:          # a request with an id is answered: the report as it travels
            session.send(P.with_id(report.frame(), req.id))

    async def _positions(self, session: Session, req: Request) -> None:
        """Every unit's newest position; newer reports are pushed to the session from now on."""
        session.reads_positions = True
        session.send(P.with_id(P.positions(self.server.positions.snapshot()), req.id))

    async def _search(self, session: Session, req: Request) -> None:
        """Full-text search of this site's history, never in a room the user may not read.

        The query's rules are checked now; the search runs in the search pool (search.py), off the event
        loop, and a task of the server's sends its results, so this client's next frames are read meanwhile."""
        user, f = session.user, req.fields
        assert user is not None
        rooms = self.server.core.rooms
        if "room" in f:
            rooms.check_access(user, f["room"], "search")
        try:
            fts_query(f["query"])
        except QueryError as e:
            raise Refusal(E.BAD_FIELD, f"search: {e}") from None
        self.server.index_for_search()          # (messages are indexed in batches: this one sees them all)
        found = self.server.searches.submit(user, f["query"], hidden_rooms=tuple(rooms.hidden_from(user)),
                                            room=f.get("room"), user=f.get("user"), since=f.get("from"),
                                            until=f.get("to"), limit=min(f.get("limit", SEARCH_LIMIT), SEARCH_MAX))
        self.server.tasks.spawn(self._search_results(session, req, found))

    async def _search_results(self, session: Session, req: Request, found: Awaitable[list[Hit]]) -> None:
        try:
            hits = await found
        except Refusal as e:
            session.send(P.error(e.code, e.message, req.reply_to))
            return
        except Exception as e:
            session.send(failed(e, "a search", session.remote, req.reply_to))
            return
        hidden = self.server.core.rooms.hidden_from(session.user or "")
        hits = [h for h in hits if h[0].room not in hidden]      # (a room may have been closed to the user since)
        may_read = self.server.core.reader(session.user or "")
        if may_read is not None:            # (labeled missions: a message above the user's clearance is not found)
            hits = [h for h in hits if may_read(h[0].label)]
        frames = self.server.history.frames([m for m, _ in hits])
        for frame, (_, spans) in zip(frames, hits):
            frame["highlights"] = spans
        session.send(P.with_id(P.results(req.fields["query"], frames), req.id))

    async def _mark_read(self, session: Session, req: Request) -> None:
        """Move the user's read marker in a room forward; every session of the user hears of it."""
        user, f = session.user, req.fields
        assert user is not None
        actions, frame = self.server.core.mark_read(user, f["room"], f["order"])
        self.server.apply(actions)
        session.send(P.with_id(dict(frame), req.id))
        for other in self.server.sessions.of_user(user):
            if other is not session:
                other.send(frame)

    async def _acknowledge(self, session: Session, req: Request) -> None:
        """A user acknowledges a flash or immediate message: every site hears of it (in the global order),
        once per user and message. A repeat sends nothing: once the acknowledgement is here it is answered
        with the ``acknowledged`` frame the room got; while it is on its way, with the first one's answer."""
        user, msg_id = session.user, req.fields["msg_id"]
        assert user is not None
        m = self.server.store.message(msg_id) if self.readable_room(user, msg_id) is not None else None
        may_read = self.server.core.reader(user)
        if m is not None and may_read is not None and not may_read(m.label):
            m = None                # (above the user's clearance: answered as a message that is not here)
        if m is None:
            raise Refusal(E.BAD_FIELD, f"acknowledge: no message {msg_id!r} at this site")
        if not m.precedence.urgent:
            raise Refusal(E.BAD_FIELD, "acknowledge: only flash and immediate messages ask for acknowledgement")
        site = self.server.site
        at = self.server.store.acknowledged_at(msg_id, user, site)
        if at is not None:
            self._acknowledging.pop((user, msg_id), None)
            session.send(P.with_id(P.acknowledged(msg_id, user, site, at), req.id))
            return
        key = (user, msg_id)
        first = self._acknowledging.get(key)
        if first is None:
            if len(self._acknowledging) >= ACKNOWLEDGING_MAX:
                self._acknowledging.clear()
            core = self.server.core
            dests = core.rooms.reach(m.room, core.labels.stored(m.label)) if core.labels.enabled else None
            first = self._acknowledging[key] = self.server.tasks.spawn(self._send_acknowledgement(user, msg_id, dests))
        try:
            ref = await asyncio.shield(first)
        except Exception:
            if self._acknowledging.get(key) is first:
                del self._acknowledging[key]                    # not sent: a retry may send it
            raise
        session.send(P.with_id({"type": "acknowledging", "msg_id": msg_id, "ref": ref}, req.id))

    async def _send_acknowledgement(self, user: str, msg_id: str, dests: tuple[str, ...] | None) -> str:
        """Send an acknowledgement to where its message went (``dests``, labeling.py: no wider)."""
        acc = await rcm_port.send(self.server.rcm, encode_payload(Acknowledgement(msg_id, user, self.server.clock())),
                                  dests)
        return acc.msg_id

    def readable_room(self, user: str, msg_id: str) -> str | None:
        """The room of message ``msg_id`` if this site has it and ``user`` may read that room; else None.

        Every answer about a msg_id starts here: a message the user may not read is answered as one that
        does not exist, by the same path (one lookup of its room, then the room rule; the message itself is
        read only for a reader), so that walking msg_ids (``<site>:<seq>``) names no private room and
        counts none of its messages, by the answer or by its time."""
        room = self.server.store.room_of(msg_id)
        readable = self.server.core.rooms.visible(user, room or "")     # for no room too: the same steps
        return room if readable else None

    async def _create(self, session: Session, req: Request) -> None:
        user, f = session.user, req.fields
        assert user is not None
        core, store = self.server.core, self.server.store
        definition = core.check_create(user, f["room"], f.get("members"), self.server.settings.max_members,
                                       self.server.monotonic(), f.get("label"),
                                       lambda name: store.password_hash(name) is not None)
        label = core.labels.stored(definition.label)
        hosts = (definition.sites or None) if isinstance(definition, RoomDefinition) else None
        dests = core.definition_dests(label, hosts, core.control_dests())
        reach = core.labels.reach(label, hosts)      # it may cross the sites its room's content may reach
        acc = await rcm_port.send(self.server.rcm, encode_payload(definition), dests,
                                  within=False if reach is None else reach)
        members = list(definition.members) if isinstance(definition, RoomDefinition) else []
        frame = P.created(definition.room, members, acc.msg_id)
        if core.labels.enabled:
            frame["label"] = label.to_json()
        session.send(P.with_id(frame, req.id))

    def _start_say(self, session: Session, req: Request) -> None:
        """Check a ``say`` now, in arrival order; send it in a task so that a client's says pipeline.

        The tasks run in the order they were created and each hands its message to RCM in its first
        step, so a client's messages enter RCM in the order it sent them, while RCM round trips and
        journal fsyncs overlap (group commit)."""
        f, user = req.fields, session.user
        assert user is not None
        room, cid = f["room"], f["client_id"]
        checked = self.server.core.check_message(user, room, f.get("label"))
        known = self.server.pipeline.known(user, cid)
        if known is not None:                 # a retry after a reconnect: same message, same ack
            session.send(P.with_id(P.ack(cid, known), req.id))
            return
        if not self.server.pipeline.busy(user, cid):      # (a retry in flight shares the first one's answer)
            self.urgent.check(user, f["precedence"], self.server.monotonic())
        answered = self.readable_room(user, f["reply_to"]) if f.get("reply_to") else None
        if answered is not None and answered != room:      # unknown or unreadable: may arrive later, allowed
            raise Refusal(E.BAD_FIELD, f"say: {f['reply_to']} is a message of another room")
        task = self.server.tasks.spawn(self._say(session, req, checked), finish=True)
        session.says.add(task)          # (the connection's back-pressure: pace_says)
        task.add_done_callback(session.says.discard)

    async def _say(self, session: Session, req: Request, checked: Say) -> None:
        f, user = req.fields, session.user
        assert user is not None
        try:
            draft = Draft(f["room"], f["text"], f["client_id"], f.get("reply_to", ""), f["precedence"],
                          f.get("expires_in"), checked.label, checked.dests)
            ack = await self.server.pipeline.say(user, draft, checked.private)
            session.send(P.with_id(dict(ack), req.id))
        except Refusal as e:
            session.send(P.error(e.code, e.message, req.reply_to))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            session.send(failed(e, "a say", session.remote, req.reply_to))
