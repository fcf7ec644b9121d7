"""The latest-wins layer of a site's stack: reports in, LATEST frames out on the neighbours' links (sans-IO).

Theory of operation (``rcm.latest.table`` holds the state and the rules)
-----------------------------------------------------------------------
LATEST frames travel hop by hop on the direct connections between sites,
outside every channel's reliable stream: not numbered, not acknowledged, not
resent (a lost one is superseded by the next report, and a new session marks
every live entry again). A neighbour is written to only while its connection
is adopted and its link is ``TCP_Connected`` (heard recently): what waits for
a silent link stays a key in its dirty set, so when the link is heard again
only the newest report of each key crosses it.

On an unpaced link the dirty entries are written at the end of each input
batch (``flush``). On a paced link (``[sites.A.rate]``) the pacing layer
decides (``rcm.channels.pacing``): a LATEST frame is written only when the link
is idle (everything written before it has left at the link's rate), so at most
one LATEST frame is ever ahead of a FLASH; the urgent lanes go before it; it
shares the link with the ordered lane byte for byte (``lanes.LATEST_SHARE``),
so neither a chat backlog nor a stream of reports starves the other. The
channel layer asks ``take`` for the frame when it is LATEST's turn.

Kept entries (a local publish, a newer received report) go up to the local
clients as ``rcm.actions.Latest``; ``live`` lists what a client that says hello
gets at once.
"""
from __future__ import annotations

from typing import Any

from rcm.actions import Action, Latest
from rcm.channels.layer import Channels
from rcm.channels.peer import Peer
from rcm.connman import TcpState
from rcm.latest.table import LatestTable
from rcm.routing.router import Router
from rcm.wire.latest import Entry, encode_frame


def _event(e: Entry) -> Latest:
    return Latest(e.origin, e.key, e.version, e.expires_at, e.payload, e.hops)


class LatestLayer:
    """One site's latest-wins traffic (see the module docstring)."""

    def __init__(self, site: str, relaying: bool, max_hops: int, channels: Channels, router: Router,
                 out: list[Action]) -> None:
        self.site = site
        self.table = LatestTable(site, relaying, max_hops)
        self.channels = channels
        self.peers = channels.peers
        self.router = router
        self.out = out

    # -- events -------------------------------------------------------------------------------------
    def publish(self, key: bytes, payload: bytes, expires_at: float, now: float) -> None:
        """A local client's report (``LatestError`` out of bounds); delivered back to the local clients."""
        e = self.table.publish(key, payload, expires_at, now, self._neighbours())
        if e is not None:
            self.out.append(_event(e))

    def received(self, p: Peer, e: Entry, now: float) -> None:
        """A LATEST frame's entry from neighbour ``p``: kept and delivered if it is the newest."""
        kept = self.table.received(p.name, e, now, self._neighbours(), self._linked)
        if kept is not None:
            self.out.append(_event(kept))

    def session_opened(self, p: Peer, now: float) -> None:
        """``p``'s connection was adopted (a new session): it gets every live entry it should have."""
        self.table.session_opened(p.name, now)

    def live(self, now: float) -> list[Latest]:
        """Every live entry, as the events a local client gets when it says hello."""
        return [_event(e) for e in self.table.live(now)]

    def expire(self, now: float) -> None:
        self.table.expire(now)

    # -- writing --------------------------------------------------------------------------------------
    def writable(self, p: Peer) -> bool:
        """May LATEST frames be written to neighbour ``p`` now (adopted connection, heard recently)?"""
        return p.conn is not None and p.cm.tcp is TcpState.CONNECTED and p.conn in self.channels.connections

    def waiting(self, neighbour: str) -> bool:
        """Does ``neighbour`` have dirty entries, and may they be written now?"""
        return self.table.waiting(neighbour) and self.writable(self.peers[neighbour])

    def take(self, neighbour: str, now: float) -> list[Any] | None:
        """The next LATEST frame for ``neighbour`` (the entry as held now), or None."""
        got = self.table.take(neighbour, now)
        if got is None:
            return None
        return encode_frame(got[0], self.router.index, got[1])

    def write_one(self, p: Peer, now: float) -> bool:
        """Write ``p``'s next LATEST frame on its connection; False when none was live."""
        frame = self.take(p.name, now)
        if frame is None or p.conn is None:
            return False
        self.channels.connections.write(self.channels.connections[p.conn], frame)
        p.cm.frame_sent(now)
        return True

    def flush(self, now: float) -> None:
        """End of a batch: every writable neighbour's dirty entries go out (a paced link's when its
        pacer allows, through the channel layer)."""
        pacing = self.channels.pacing
        for name in self.table.waiting_neighbours():
            p = self.peers[name]
            if not self.writable(p):
                continue
            if pacing.paced(name):
                self.channels.service(p, now)
            else:
                while self.write_one(p, now):
                    pass

    def stats(self) -> dict[str, Any]:
        return self.table.stats()

    # -- internals ---------------------------------------------------------------------------------------
    def _neighbours(self) -> list[str]:
        """The peers with an adopted direct connection (a silent one too: its dirty entries wait)."""
        return [n for n, p in self.peers.items() if p.conn is not None]

    def _linked(self, a: str, b: str) -> bool:
        """Does the link-state show a live direct link between ``a`` and ``b`` (both advertise it)? Then
        ``b`` gets ``a``'s entries from ``a`` itself, and a relay need not write them to it."""
        links = self.router.links
        return bool(links.lists(a, b)) and bool(links.lists(b, a))

