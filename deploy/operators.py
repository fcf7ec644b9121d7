"""Scripted operators for the demo: chat users who join rooms and talk, at their own site.

Each ``Operator`` logs in to its site's chat server with
``chat_server.client.ChatClient`` (``reconnect=True``, so a restarted chat
server or a dropped connection is resumed without losing anything), joins its
rooms, and says a line from its role's script every few seconds (seeded, so a
demo run is reproducible in what is said). It counts what it said, what was
acknowledged, and every message it received (distinct ``msg_id``s, and how
many came ``late``; as sets, so a site's operators can be counted together).
"""
from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from chat_server.client import ChatClient, ChatClosed, ChatError

GROUND_LINES = [
    "Tasking update for the next cycle is posted.",
    "Weather at the forward strip: ceiling 2000, visibility 5 miles.",
    "Request status of the tanker track.",
    "Copy, we have the latest picture.",
    "Logistics convoy departed on schedule.",
    "Confirm the frequency plan for tonight's window.",
    "Maintenance reports two aircraft returned to service.",
    "Intel summary will be ready in ten minutes.",
    "Roger, standing by for your update.",
    "Fuel state at the depot is nominal.",
]
AIR_LINES = [
    "On station, all sensors up.",
    "New track bearing 045, 80 miles, heading south.",
    "Lost datalink for a few seconds, back now.",
    "Tanker on station at the eastern anchor.",
    "Two contacts merged, monitoring.",
    "Request updated airspace control order.",
    "Radar picture passed to ground, confirm receipt.",
    "Fuel for two more hours on station.",
    "Copy tasking, moving to the northern orbit.",
    "Weather building to the west, adjusting orbit.",
]


@dataclass
class OperatorStats:
    said: int = 0
    acked: int = 0
    refused: int = 0
    received: set[str] = field(default_factory=set)
    late: set[str] = field(default_factory=set)     # msg_ids that arrived marked late
    missing_notices: int = 0
    connected: bool = False


class Operator:
    """One scripted user at one site."""

    def __init__(self, site: str, user: str, password: str, url: str, rooms: list[str], airborne: bool,
                 mean_interval: float = 6.0, seed: int = 0) -> None:
        self.site, self.user, self.password, self.url = site, user, password, url
        self.rooms = rooms
        self.lines = AIR_LINES if airborne else GROUND_LINES
        self.mean_interval = mean_interval
        self.rng = random.Random(f"{seed}/{site}/{user}")
        self.stats = OperatorStats()
        self.client: ChatClient | None = None

    def _on_frame(self, frame: dict[str, Any]) -> None:
        t = frame.get("type")
        if t == "message" and isinstance(frame.get("msg_id"), str):
            if frame["msg_id"] not in self.stats.received:
                self.stats.received.add(frame["msg_id"])
                if frame.get("late"):
                    self.stats.late.add(frame["msg_id"])
        elif t == "missing":
            self.stats.missing_notices += 1

    async def run(self, stop: asyncio.Event) -> None:
        """Log in (retrying until the server answers), join, talk until ``stop``."""
        while self.client is None and not stop.is_set():
            try:
                self.client = await ChatClient.connect(self.url, self.user, self.password, reconnect=True,
                                                       timeout=10.0)
            except (TimeoutError, ChatError, ChatClosed, OSError, aiohttp.ClientError):
                await _sleep_or_stop(stop, 1.0)
        if self.client is None:
            return
        client = self.client
        client.on_frame = self._on_frame
        self.stats.connected = True
        try:
            for room in self.rooms:
                await client.join(room)
            client.drain_events()
            n = 0
            while not stop.is_set():
                await _sleep_or_stop(stop, self.rng.expovariate(1.0 / self.mean_interval) + 0.5)
                if stop.is_set():
                    break
                n += 1
                room = self.rng.choice(self.rooms)
                text = f"{self.rng.choice(self.lines)} ({self.user}@{self.site} #{n})"
                self.stats.said += 1
                try:
                    await client.say(room, text, client_id=f"{self.user}-{self.site}-{n}")
                    self.stats.acked += 1
                except ChatError:
                    self.stats.refused += 1
                except TimeoutError:
                    self.stats.refused += 1
                client.drain_events()
        except ChatClosed:
            self.stats.connected = False

    async def close(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.close()


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
