"""The connection layer: inter-site connections, their bytes out, and their handshake limits (sans-IO).

Theory of operation
-------------------
A ``Conn`` is one TCP connection from accept or dial to close (``rcm.channels.peer``).
This layer owns them: what each will transmit at the end of the batch (one
``Transmit`` per connection), ``Close`` actions, the dial numbering, and the
cap on accepted connections still in their handshake (``max_handshaking``:
one more is refused at once, logged at most once a minute). It knows nothing
of channels or routes; the layers above write through it (``write``) and it
tells them, through ``on_write``, how many bytes went to which peer (the
channel layer counts them, the pacing layer charges them).

Lingering. On a slow link every write costs a TLS record and a radio packet
beside its frames, and the stack writes at many moments (an acknowledgement,
an announcement, a heartbeat, a line). So a batch's ``Transmit`` to a peer in
``lingers`` (``Pacing.linger``: paced slower than 64 kbit/s) carries ``hold``:
the edge may keep it up to that long, and what the next batches write to the
connection joins it, in one write (or as soon as ``LINGER_BYTES`` of frames
wait at the edge: more gains little, and a backlog's pacer stays charged the
uncompressed bytes until the write). A batch that wrote anything urgent to the
connection (``urgent``: a FLASH or IMMEDIATE frame, the pacer's urgent turn)
holds nothing, and takes what waits along at once.

Dialing rule (``rcm.wire.handshake.keeps_new``): both sites dial while they have no
connection; of two connections between the same pair, both ends keep the one
dialed by the site whose name sorts first, so the pair converges on one.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from rcm import wire
from rcm.actions import Action, Close, Log, Transmit
from rcm.channels.peer import Conn


class Connections:
    """One site's inter-site connections (see the module docstring)."""

    def __init__(self, site: str, hello_max_frame: int, max_handshaking: int, handshake_timeout: float,
                 out: list[Action], on_write: Callable[[str, int], None],
                 lingers: dict[str, float] | None = None) -> None:
        """``lingers``: peer -> how long a write to it may wait (see Lingering; ``Pacing.linger``)."""
        self.site = site
        self.hello_max_frame = hello_max_frame
        self.max_handshaking = max_handshaking
        self.handshake_timeout = handshake_timeout
        self.out = out                  # the stack's actions of this batch
        self.on_write = on_write        # (peer, bytes) once a connection knows its peer
        self.lingers = lingers or {}
        self._urgent: set[Hashable] = set()     # connections written something urgent in this batch
        self.conns: dict[Hashable, Conn] = {}
        self.refused = 0                # connections refused for max_handshaking
        self._tx: dict[Hashable, list[bytes]] = {}
        self._dials = 0
        self._log_at = float("-inf")
        self._log_count = 0

    def __contains__(self, conn: Hashable) -> bool:
        return conn in self.conns

    def get(self, conn: Hashable) -> Conn | None:
        return self.conns.get(conn)

    def __getitem__(self, conn: Hashable) -> Conn:
        return self.conns[conn]

    def open_ids(self) -> list[Hashable]:
        """The connections past their handshake, in the order they were made."""
        return [c.id for c in self.conns.values() if c.open]

    def dialing(self, peer: str) -> bool:
        """Is a connection we dialed to ``peer`` still in its handshake?"""
        return any(not c.open and c.dialed_peer == peer for c in self.conns.values())

    def handshaking(self) -> int:
        """Accepted connections that have not finished their HELLO."""
        return sum(1 for c in self.conns.values() if not c.open and c.dialed_peer is None)

    # -- lifecycle --------------------------------------------------------------------------------
    def made(self, conn: Hashable, now: float, dialed: str | None,
             identity: tuple[str, str] | None) -> Conn | None:
        """A new connection (``dialed``: the peer we dialed); None if refused for ``max_handshaking``."""
        if conn in self.conns:
            raise ValueError(f"connection {conn!r} already known")
        c = Conn(conn, dialed, wire.FrameDecoder(self.hello_max_frame), now, identity)
        if dialed is None and self.handshaking() >= self.max_handshaking:
            self._refuse_handshake(c, now)
            return None
        self.conns[conn] = c
        if dialed is not None:
            self._dials += 1
            c.dial_seq = self._dials
        return c

    def lost(self, conn: Hashable) -> Conn | None:
        """The edge saw the connection close: forget it and what it had to transmit."""
        c = self.conns.pop(conn, None)
        if c is not None:
            self._tx.pop(conn, None)
        return c

    def close(self, c: Conn, reason: str, bye: bool, incompatible: bool = False) -> None:
        """End ``c`` (with a BYE naming ``reason`` first, if ``bye``): its bytes, then ``Close``."""
        if bye:
            self.write(c, [wire.BYE, reason[:200], 1] if incompatible else [wire.BYE, reason[:200]])
        chunks = self._tx.pop(c.id, None)
        if chunks:
            self.out.append(Transmit(c.id, b"".join(chunks)))
        self.out.append(Close(c.id, reason))
        self.conns.pop(c.id, None)

    def expired(self, now: float) -> list[Conn]:
        """Connections whose handshake did not finish within ``handshake_timeout``."""
        return [c for c in self.conns.values() if not c.open and now >= c.opened_at + self.handshake_timeout]

    def next_deadline(self) -> float | None:
        ds = [c.opened_at + self.handshake_timeout for c in self.conns.values() if not c.open]
        return min(ds) if ds else None

    # -- bytes out --------------------------------------------------------------------------------
    def write(self, c: Conn, frame: list[Any]) -> None:
        self.write_bytes(c, wire.encode_frame(frame))

    def write_bytes(self, c: Conn, data: bytes) -> None:
        self._tx.setdefault(c.id, []).append(data)
        if c.peer is not None:
            self.on_write(c.peer, len(data))

    def urgent(self, conn: Hashable) -> None:
        """Something urgent went to ``conn`` in this batch: the edge writes the batch's bytes at once."""
        self._urgent.add(conn)

    def written(self, conn: Hashable) -> int:
        """How many chunks wait for ``conn`` in this batch (so a caller can measure what it adds)."""
        return len(self._tx.get(conn, ()))

    def flush(self) -> list[Transmit]:
        """The batch's bytes: one ``Transmit`` per connection (a ``Close`` already carried its own)."""
        out = [Transmit(conn, b"".join(chunks), self._hold(conn)) for conn, chunks in self._tx.items() if chunks]
        self._tx = {}
        self._urgent.clear()
        return out

    def _hold(self, conn: Hashable) -> float:
        c = self.conns.get(conn)
        if c is None or c.peer is None or not c.open or conn in self._urgent:
            return 0.0
        return self.lingers.get(c.peer, 0.0)

    def _refuse_handshake(self, c: Conn, now: float) -> None:
        """Close a connection accepted while ``max_handshaking`` others are still in HELLO.

        Logged at most once a minute (with how many were refused), so a flood
        of connections does not flood the log too.
        """
        reason = (f"refused: {self.site} has {self.max_handshaking} connections in handshake "
                  "([rcm] max_handshaking); try again later")
        self.refused += 1
        self._log_count += 1
        if now >= self._log_at + 60.0:
            self.out.append(Log("warning", f"{reason} ({self._log_count} refused since the last such line)"))
            self._log_at = now
            self._log_count = 0
        self.close(c, reason, bye=True)
