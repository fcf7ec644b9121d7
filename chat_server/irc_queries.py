"""The IRC front end's answers to what only asks the server: users (``WHOWAS``, ``ISON``, ``USERHOST``,
``AWAY``), the server (``MOTD``, ``VERSION``, ``LUSERS``, ``TIME``, ``LINKS``, ``INFO``, ``ADMIN``, ``HELP``,
``STATS``, ``TRACE``, ``SERVLIST``, ``SQUERY``), and what a user of a chat whose rooms are defined elsewhere
may not do (``OPER`` and the operators' commands, ``USERS``, ``SUMMON``, ``INVITE``, ``KICK``): each answered
plainly from the session's state, never ``Unknown command`` (weechat and irssi users type them). No request
goes to the chat server. ``irc_commands.py`` adds the client's lines that do (channels, says).
"""
from __future__ import annotations

import time

from .irc_login import IrcLogin
from .irc_state import Action

HELP_LINES = """You are on the chat server of site {site} in mission {network}: one chat across every site, over RCM.
Channels are the mission's rooms: /list, /join #room, /part #room; a private room (+i) has the members its \
definition names (made in the web UI or the TUI).
!flash TEXT, !immediate TEXT, !priority TEXT in a channel send at that precedence; !ack acknowledges the \
FLASH and IMMEDIATE lines shown to you.
Lines late behind the global order, or recovered after a disconnection, come as NOTICEs marked [LATE +Ns] and \
[REPAIRED +Ns]; a site's status changes as *** NOTICEs; /links shows every site and how this one reaches it.
/whois NICK: the sites where a user is online. There are no private messages: write in a channel you share.
Older lines: CHATHISTORY (IRCv3), or /history in the TUI. More: docs/irc.md."""


class IrcQueries(IrcLogin):
    """Answers from the session's own state (see the module docstring)."""

    def _need(self, command: str, params: tuple[str, ...], n: int) -> list[Action] | None:
        if len(params) < n:
            return [self._num("461", command, "Not enough parameters")]
        return None

    def _c_whowas(self, p: tuple[str, ...], now: float) -> list[Action]:
        """No history of nicks is kept: ``406`` and the end of the list (irssi asks WHOWAS by itself after a
        WHOIS of a nick that is offline, and showed "WHOWAS Unknown command")."""
        if (missing := self._need("WHOWAS", p, 1)) is not None:
            return missing
        nick = p[0]
        return [self._num("406", nick, "There was no such nickname: this server keeps no history of nicks"),
                self._num("369", nick, "End of WHOWAS")]

    def _c_ison(self, p: tuple[str, ...], now: float) -> list[Action]:
        online = self.presence.anywhere() | {self.nick}
        return [self._num("303", " ".join(n for n in " ".join(p).split() if n in online))]

    def _c_userhost(self, p: tuple[str, ...], now: float) -> list[Action]:
        """``nick=+nick@SITE`` for each of up to five nicks online (this site, if they are online here too)."""
        out = []
        for n in p[:5]:
            sites = sorted(s for s, users in self.presence.sites.items() if n in users)
            if n == self.nick or self.site in sites:
                out.append(f"{n}=+{n}@{self.site}")
            elif sites:
                out.append(f"{n}=+{n}@{sites[0]}")
        return [self._num("302", " ".join(out))]

    def _c_away(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("306", "You have been marked as being away") if p and p[0]
                else self._num("305", "You are no longer marked as being away")]

    def _c_motd(self, p: tuple[str, ...], now: float) -> list[Action]:
        """The message of the day the welcome showed (the sites as this session last heard of them)."""
        out: list[Action] = [self._num("375", f"- {self.server_name} message of the day"),
               self._num("372", f"- You are {self.nick} at site {self.site}. Sites: "
                                + ", ".join(f"{s} {st}" for s, (st, _) in sorted(self._site_status.items()))),
               self._num("372", "- Late and repaired lines arrive as NOTICEs marked [LATE +Ns] / [REPAIRED +Ns]."),
               self._num("372", "- FLASH and IMMEDIATE lines wait for your acknowledgement: say !ack in the "
                                "channel (or !ack A:90 for one line).")]
        if self.labels.enabled:
            clearance = self.labels.clearance
            out.append(self._num("372", "- Each line starts with its security label ([SECRET] text); start yours "
                                        "with one to send it at that label, or none for the channel's (its topic)."
                                        + (f" Your clearance: {clearance}." if clearance is not None else "")))
        out.append(self._num("376", "End of /MOTD command"))
        return out

    # What clients and seasoned users send that a chat of rooms defined elsewhere answers plainly rather than
    # with "Unknown command": the server's version, how many are online, no operator statistics, and
    # members of a room that only its definition sets.
    def _c_version(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("351", "rcm-chat-1.", self.server_name, f"the chat server of site {self.site}")]

    def _c_lusers(self, p: tuple[str, ...], now: float) -> list[Action]:
        online = self.presence.anywhere() | {self.nick}
        sites = len(self.presence.sites) or 1
        here = len(self.presence.sites.get(self.site, set()) | {self.nick})
        return [self._num("251", f"There are {len(online)} users and 0 invisible on {sites} servers"),
                self._num("255", f"I have {here} clients and {sites - 1} servers")]

    def _c_time(self, p: tuple[str, ...], now: float) -> list[Action]:
        if self._wall is None:
            return [self._num("391", self.server_name, "the time is not known here")]
        return [self._num("391", self.server_name,
                          time.strftime("%A %B %d %Y -- %H:%M:%S +00:00", time.gmtime(self._wall)))]

    def _server_of(self, site: str) -> str:
        """A site's IRC server name (``LINKS`` names the same)."""
        return self.server_name if site == self.site else f"{site}.irc.{self.network}"

    def _site_words(self, site: str) -> str:
        """A site as ``LINKS`` describes it: this one, or how this site reaches it."""
        if site == self.site:
            return f"site {site}, this one"
        status, via = self._site_status.get(site, ("unknown", None))
        return (f"site {site}, {status}" + (f" via {via}" if via else "")
                + (", chat server down" if site in self._chat_down else ""))

    def _c_links(self, p: tuple[str, ...], now: float) -> list[Action]:
        """The mission's sites as this site's links: each site's IRC server name, and how this site reaches it."""
        out: list[Action] = [self._num("364", self.server_name, self.server_name, f"0 site {self.site}, this one")]
        for site in sorted(self._site_status):
            if site != self.site:
                out.append(self._num("364", self._server_of(site), self.server_name, f"1 {self._site_words(site)}"))
        return out + [self._num("365", "*", "End of /LINKS list")]

    def _c_info(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("371", f"rcm-chat-1: the chat server of site {self.site} in mission {self.network}"),
                self._num("371", "Every site's messages in one global order over RCM (after MIT Lincoln "
                                 "Laboratory's Robust Collaboration Manager), through partitions and slow links"),
                self._num("371", f"Started {self.created or 'at start-up'}"),
                self._num("374", "End of /INFO list")]

    def _c_admin(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("423", self.server_name, "No administrative info available: ask your mission's operators")]

    def _c_help(self, p: tuple[str, ...], now: float) -> list[Action]:
        subject = p[0] if p else "*"
        lines = HELP_LINES.format(site=self.site, network=self.network).split("\n")
        out: list[Action] = [self._num("704", subject, lines[0])]
        out += [self._num("705", subject, line) for line in lines[1:]]
        return out + [self._num("706", subject, "End of /HELP")]

    def _c_oper(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("491", "No O-lines for your host: this server has no IRC operators (sites and rooms "
                                 "are run by the mission's operators)")]

    def _not_operator(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("481", "Permission Denied- You're not an IRC operator")]

    _c_kill = _c_die = _c_rehash = _c_restart = _c_squit = _c_connect = _c_wallops = _not_operator

    # RFC 2812's answers for what a server of this kind has not: services, USERS and SUMMON, a trace.
    def _c_servlist(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("235", p[0] if p else "*", p[1] if len(p) > 1 else "*", "End of service listing")]

    def _c_squery(self, p: tuple[str, ...], now: float) -> list[Action]:
        if (missing := self._need("SQUERY", p, 1)) is not None:
            return missing
        return [self._num("408", p[0], "No such service: this server has none")]

    def _c_users(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("446", "USERS has been disabled: /who and /names say who is online")]

    def _c_summon(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("445", "SUMMON has been disabled")]

    def _c_trace(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("262", self.server_name, "rcm-chat-1.", "End of TRACE: /links shows how this site "
                                                                  "reaches the others")]

    def _c_stats(self, p: tuple[str, ...], now: float) -> list[Action]:
        return [self._num("219", p[0][:1] if p else "*", "End of /STATS report")]

    def _c_invite(self, p: tuple[str, ...], now: float) -> list[Action]:
        if (missing := self._need("INVITE", p, 2)) is not None:
            return missing
        return [self._num("482", p[1], "A private room's members are set by its definition (in the web UI or the "
                                       "TUI), not by INVITE")]

    def _c_kick(self, p: tuple[str, ...], now: float) -> list[Action]:
        if (missing := self._need("KICK", p, 2)) is not None:
            return missing
        return [self._num("482", p[0], "Nobody is kicked: a room's members are set by its definition")]
