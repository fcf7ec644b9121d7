"""The IRC front end's registration: IRCv3 capability negotiation, SASL PLAIN, and RFC 2812's PASS, NICK, USER.

A client logs in with its account name and password, either as the server
password (``PASS``, the nick being the account name) or by SASL ``PLAIN``
(``CAP REQ :sasl``, ``AUTHENTICATE PLAIN``, then the base64 of
``authzid NUL account NUL password``): both become the chat protocol's
``hello {user, password}``, so the password is checked by the one path every
client's is (logins.py: its rate limits, its refusals). A client that opens
capability negotiation (``CAP LS`` or ``CAP REQ`` before registering) is
registered at its ``CAP END``, as the specification says: a SASL log-in
answers ``900``/``903`` at once and the ``welcome`` (``001``...) waits for
``CAP END``; a failed one is ``904`` and the client may try again. With SASL
the nick becomes the account name (``001`` tells the client so).

Capabilities offered: ``batch``, ``draft/chathistory``, ``echo-message``,
``message-tags``, ``sasl`` (``sasl=PLAIN`` with ``CAP LS 302``),
``server-time``; ``CAP REQ`` is all or nothing (``ACK`` or ``NAK`` of the
whole list). Sans-IO, like the rest of the front end (``irc.py``).
"""
from __future__ import annotations

import base64
import binascii

from .irc_state import CAPABILITIES, Action, Close, IrcState, Send
from .ircline import format_line
from .protocol import USER_NAME

SASL_MAX_BYTES = 1200             # a PLAIN response longer than this (base64) is refused (905)
SASL_CHUNK = 400                  # AUTHENTICATE chunks: a full one means more follow


class IrcLogin(IrcState):
    """Registration of one IRC connection (see the module docstring)."""

    def _welcomed(self, f: dict[str, object], now: float) -> list[Action]:
        """The welcome burst (``irc.IrcSession``)."""
        raise NotImplementedError

    def _cap_reply(self, sub: str, caps: str) -> Send:
        return Send(format_line(self.server_name, "CAP", self.nick or "*", sub, caps))

    def _c_cap(self, p: tuple[str, ...], now: float) -> list[Action]:
        sub = p[0].upper() if p else ""
        if sub in ("LS", "REQ") and not self.registered:
            self._cap_open = True                   # registration waits for CAP END
        if sub == "LS":
            self._cap_302 = self._cap_302 or (len(p) > 1 and p[1].isdigit() and int(p[1]) >= 302)
            return [self._cap_reply("LS", " ".join("sasl=PLAIN" if c == "sasl" and self._cap_302 else c
                                                   for c in CAPABILITIES))]
        if sub == "REQ":
            asked = (p[1] if len(p) > 1 else "").split()
            if not asked or any(a.removeprefix("-") not in CAPABILITIES for a in asked):
                return [self._cap_reply("NAK", p[1] if len(p) > 1 else "")]
            self._negotiated(asked)
            return [self._cap_reply("ACK", " ".join(asked))]
        if sub == "LIST":
            return [self._cap_reply("LIST", " ".join(sorted(self.caps)))]
        if sub == "END":
            if self.registered or not self._cap_open:
                return []
            self._cap_open = False
            return self._maybe_hello(now)
        return [self._num("410", p[0] if p else "*", "Invalid CAP command")]

    def _c_authenticate(self, p: tuple[str, ...], now: float) -> list[Action]:
        if not p:
            return [self._num("461", "AUTHENTICATE", "Not enough parameters")]
        if self._sasl_done or self.registered:
            return [self._num("907", "You have already authenticated using SASL")]
        if "sasl" not in self.caps:
            return [self._num("904", "SASL authentication failed: request the sasl capability first")]
        if p[0] == "*":
            self._sasl = None
            return [self._num("906", "SASL authentication aborted")]
        if self._hello_sent:
            return [self._num("904", "SASL authentication failed: a log-in is being checked")]
        if self._sasl is None:
            if p[0].upper() != "PLAIN":
                return [self._num("908", "PLAIN", "are available SASL mechanisms"),
                        self._num("904", "SASL authentication failed")]
            self._sasl = ""
            return [Send(format_line("", "AUTHENTICATE", "+"))]
        if p[0] != "+":
            self._sasl += p[0]
        if len(self._sasl) > SASL_MAX_BYTES:
            self._sasl = None
            return [self._num("905", "SASL message too long")]
        if len(p[0]) == SASL_CHUNK:
            return []                               # more chunks follow
        data, self._sasl = self._sasl, None
        try:
            authzid, account, password = base64.b64decode(data, validate=True).decode("utf-8").split("\0")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return [self._num("904", "SASL authentication failed: not a PLAIN response")]
        if (authzid and authzid != account) or not USER_NAME.match(account):
            return [self._num("904", "SASL authentication failed: log in with your account name")]
        self._hello_sent = True
        return [self._request("SASL", (account,), {"type": "hello", "user": account, "password": password})]

    def _sasl_logged_in(self, f: dict[str, object], account: str, now: float) -> list[Action]:
        """The chat server took the SASL password: 900 and 903, then the welcome once registration ends."""
        self._sasl_done = True
        out: list[Action] = [self._num("900", f"{account}!{account}@{self.site}", account,
                                       f"You are now logged in as {account}"),
                             self._num("903", "SASL authentication successful")]
        self.nick = account
        if self._cap_open or not self._user_given:
            self._held_welcome = f
            return out
        return out + self._welcomed(f, now)

    def _sasl_refused(self, code: str, message: str, now: float) -> list[Action]:
        """The chat server refused the SASL password: 904; the client may try again (or, registration over, the
        server password is tried, or the connection ends as without one)."""
        self._hello_sent = False
        why = f": {message}" if code == "rate_limited" else ""
        out: list[Action] = [self._num("904", f"SASL authentication failed{why}")]
        return out + (self._maybe_hello(now) if not self._cap_open else [])

    def _c_pass(self, p: tuple[str, ...], now: float) -> list[Action]:
        if self.registered or self._hello_sent:
            return [self._num("462", "You may not reregister")]
        # Clients send a password with spaces without the trailing colon (irssi: PASS correct horse).
        if not p:
            return [self._num("461", "PASS", "Not enough parameters")]
        self._password = " ".join(p)
        return []

    def _c_nick(self, p: tuple[str, ...], now: float) -> list[Action]:
        if not p:
            return [self._num("431", "No nickname given")]
        if self.registered or self._hello_sent or self._sasl_done:
            if p[0] == self.nick:
                return []
            return [self._num("432", p[0], "Nick changes are not supported: your nick is your account name")]
        if not USER_NAME.match(p[0]):
            return [self._num("432", p[0], "Erroneous nickname: use your account name")]
        self.nick = p[0]
        return self._maybe_hello(now)

    def _c_user(self, p: tuple[str, ...], now: float) -> list[Action]:
        if self.registered or self._user_given:
            return [self._num("462", "You may not reregister")]
        if len(p) < 4:
            return [self._num("461", "USER", "Not enough parameters")]
        self._user_given = True
        return self._maybe_hello(now)

    def _maybe_hello(self, now: float) -> list[Action]:
        """Registration, once NICK and USER are in and capability negotiation is over: the welcome a SASL log-in
        holds, or a ``hello`` with the server password (none: 464 and the connection ends)."""
        if not (self.nick and self._user_given) or self._cap_open or self.registered:
            return []
        if self._held_welcome is not None:
            held, self._held_welcome = self._held_welcome, None
            return self._welcomed(held, now)
        if self._hello_sent or self._sasl_done:
            return []
        if self._password is None:
            self.closed = True
            return [self._num("464", "Password required: set your account password as the server password (PASS) "
                                     "or log in by SASL PLAIN"),
                    Send(format_line("", "ERROR", "Closing Link: password required")), Close("no password")]
        self._hello_sent = True
        password, self._password = self._password, None
        return [self._request("HELLO", (), {"type": "hello", "user": self.nick, "password": password})]
