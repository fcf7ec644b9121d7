"""Run the real sans-IO RCM stacks of N sites over the simulated network.

Theory of operation
-------------------
``simulate(seed, config)`` is a pure function of its arguments. One
``random.Random(seed)`` draws, in this order: the link delay models, the clock
skews, the fault episodes, the workload, and then every runtime choice
(delays, segment splits). Each site runs an ``rcm.stack.SiteStack`` exactly as
the real server does; the simulation is its edge: it feeds network events to
the stack with the site's local time (virtual time plus the site's clock
skew), executes the returned actions on the simulated network, records
journal records (Contract 3, built by ``contracts.journal.record``, with
virtual ``at`` times, and no chat content: a message is opaque bytes here),
and keeps one timer per site at the stack's ``next_deadline()``.

With ``durable = True`` each site is run as the server runs it by default:
its stack emits write-ahead log records (``Persist``), deliveries are
numbered by ``rcm.durability.replay.DeliveryLog`` and logged, and everything goes to the
site's simulated disk (a list of records that survives a crash: a kill -9
loses nothing the server wrote). A crashed site restarts from its disk with
the same stream identity (peers resume its stream exactly) and one more boot;
the log is compacted every ``compact_every`` records, as the server does past
``wal_max_bytes``. Its journal records then carry the stream identity as
``inc``, so the checkers hold it to exactly once and FIFO *across* restarts,
and to reliability through crashes (a crash alone excuses no loss).

A run has a chaos phase (fault episodes, see ``schedule``) and then a heal
phase with every link up and every site running, long enough for statuses to
settle (robustness) and for every message to arrive (reliability). Clients
stop sending ``quiet`` seconds before the end.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

import msgpack

from chat_server.journal import missing_records
from contracts import journal as J
from contracts.mission import RcmSettings
from contracts.precedence import DEFAULT
from faultinject.checkers import (
    AwarenessBounds,
    History,
    LinkEvent,
    LinkTimeline,
    Violation,
    check_all,
    check_expiry,
)
from faultinject.checkers.history import DOWN
from faultinject.checkers.leaks import LeakWatch, check_journal_labels
from faultinject.checkers.properties import settle_with_window
from rcm.actions import (
    Backpressure,
    Close,
    Delivery,
    Dial,
    Missing,
    Persist,
    SendRefused,
    StatusChange,
    Transmit,
)
from rcm.durability.records import Record
from rcm.durability.records import encode as encode_record
from rcm.durability.replay import DeliveryLog
from rcm.ranges import normalize
from rcm.stack import SiteStack
from rcm.stack.recovery import compacted, compaction_due

from .labels import LabelPlan
from .measure import measure
from .network import End, EventLoop, LinkModel, Network, SimError, default_models
from .schedule import Episode, compile_schedule, make_episodes, make_repair_episodes
from .topology import LETTERS, site_names
from .workload import make_workload, paced_links

SITE_NAMES = LETTERS

# Paper timeouts scaled to a fast simulated world: links of 5-300 ms.
SIM_SETTINGS = RcmSettings(heartbeat_timeout=0.5, liveness_timeout=1.5, silence_timeout=3.0,
                           suspect_timeout=5.0, reconnect_period=1.0, ack_interval=0.2,
                           handshake_timeout=2.0, repair_period=2.5)


@dataclass(frozen=True)
class SimConfig:
    """One simulated mission: sites, timing, faults and workload."""

    protocol: str = "lamport"
    sites: int = 3
    chaos: float = 20.0          # seconds of faults
    heal: float = 15.0           # then everything up
    quiet: float = 4.0           # no sends in the last seconds
    rate: float = 1.0            # messages per second per site
    faults: int = 4              # fault episodes in the chaos phase
    skew: float = 0.01           # max |clock skew| of a site, seconds
    subset_prob: float = 0.2     # share of sends to a subset of sites
    payload: tuple[int, int] = (16, 120)   # payload size range, bytes
    connect_timeout: float = 1.0
    settings: RcmSettings = SIM_SETTINGS
    margin: float = 1.5          # checker: after a view change
    settle: float = 2.5          # checker: delivery bound in a stable period
    # The stacks run with these instead of ``settings`` while the checkers keep
    # assuming ``settings``: a deliberately mis-configured connection manager.
    stack_settings: RcmSettings | None = None
    durable: bool = False        # write-ahead log on a simulated disk; restarts recover from it
    compact_every: int = 150     # durable: compact a site's log past this many records
    # Precedence (issue 19): shares of FLASH, IMMEDIATE and PRIORITY sends (the rest ROUTINE), and
    # every site pacing every link to ``link_rate`` bits per second (0: unpaced), so lanes reorder.
    precedence_mix: tuple[float, float, float] = (0.0, 0.0, 0.0)
    link_rate: int = 0
    # With ``link_rate``: the share of site pairs whose link is paced (both ways); the others are
    # not, so routes mix paced and unpaced hops (a relayed channel paced beyond its first hop).
    paced_share: float = 1.0
    repair_faults: int = 0       # more episodes: a site cut off past suspect_timeout, then a crash during repair
    # Expiry (rcm.wire.envelope): the share of sends that expire, ``expiry_ttl`` seconds (a range) after they are
    # sent; a stub is journaled as a delivery and an ``expired`` record (checkers.expiry).
    expiry_share: float = 0.0
    expiry_ttl: tuple[float, float] = (0.5, 8.0)
    # A partial mesh (``topology``): the pairs of sites that have a link (None: every pair). The others
    # are down from the start and stay down whatever an episode asks; ``episodes`` are more fault
    # episodes (e.g. ``topology.periodic_flaps``), compiled with the seeded ones.
    topology: tuple[tuple[str, str], ...] | None = None
    episodes: tuple[Episode, ...] = ()
    check: bool = True           # False: no checkers, no latency split (a large benchmark run)
    # Security labels (``labels``): a seeded scheme, clearances and a label per message, sent only to the
    # sites cleared for it; the leak checker (``checkers.leaks``) watches every frame, delivery and log record.
    labels: bool = False

    def rcm_settings(self) -> RcmSettings:
        return replace(self.stack_settings or self.settings, ordering=self.protocol)

    def bounds(self, models: dict[tuple[str, str], LinkModel]) -> AwarenessBounds:
        s = self.settings
        max_delay = max(m.cap for m in models.values())
        # Up: one redial period, a failing dial hanging for connect_timeout, a
        # handshake (two round trips), and a retransmission after a blackhole.
        t_up = s.reconnect_period + self.connect_timeout + 4 * max_delay + 0.5
        # Down: liveness after the last frame, which left at most one delay earlier.
        t_down = s.liveness_timeout + max_delay + 0.1
        # Relaying: a path's change is learnt from link-state adverts crossing up to max_hops links.
        relay = s.max_hops * max_delay + 0.1 if self.rcm_settings().relaying else 0.0
        return AwarenessBounds(t_up=t_up, t_down=t_down, suspect=s.suspect_timeout, relay=relay)

    def repair_window(self, bounds: AwarenessBounds) -> float | None:
        """How long repair may take once a path exists (``checkers.eventual``); None: sites do not repair."""
        s = self.settings       # what the checkers assume (``stack_settings`` may differ on purpose)
        if not (s.repair and s.p2p == "robust"):
            return None
        return bounds.t_up + bounds.relay + self.settings.repair_period + 2.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["settings"] = asdict(self.settings)
        if self.stack_settings is not None:
            d["stack_settings"] = asdict(self.stack_settings)
        return d


@dataclass
class SimResult:
    seed: int
    config: SimConfig
    records: list[dict[str, Any]]
    trace: list[list[Any]]
    violations: list[Violation]
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def trace_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "config": self.config.to_json(), "faults": self.trace,
                "violations": [str(v) for v in self.violations], "stats": self.stats}


STREAM_ID = 1
"""A durable site's stream identity (its log id): the same across restarts, as with a real log."""


class _Site:
    __slots__ = ("name", "skew", "stack", "inc", "n", "last_local", "gen", "timer_at", "seq",
                 "spins", "last_fire", "disk", "deliveries", "compactions", "compacted")

    def __init__(self, name: str, skew: float) -> None:
        self.name = name
        self.skew = skew
        self.stack: SiteStack | None = None
        self.inc = 0
        self.n = 0
        self.last_local = float("-inf")
        self.gen = 0
        self.timer_at: float | None = None
        self.seq = 0
        self.spins = 0
        self.last_fire = -1.0
        self.disk: list[Record] = []            # durable: the write-ahead log, surviving crashes
        self.deliveries = DeliveryLog(1 << 30)  # durable: numbering, recovered from the disk
        self.compactions = 0
        self.compacted = 0                      # durable: records in the log at its last compaction


class Simulation:
    """N sites, a network, a fault schedule and a workload (see the module doc)."""

    def __init__(self, seed: int, config: SimConfig) -> None:
        self.seed = seed
        self.config = config
        # Separate streams, so that for one seed every protocol gets the same
        # links, skews, faults and workload; only network jitter draws differ.
        self.rng = random.Random(seed)
        work_rng = random.Random(f"work-{seed}")
        names = site_names(config.sites)
        self.names = names
        self.loop = EventLoop()
        self.models = default_models(self.rng, names)
        self.sites = {n: _Site(n, self.rng.uniform(-config.skew, config.skew)) for n in names}
        self.settings = config.rcm_settings()
        self.net = Network(self.loop, self.rng, names, self.models, self,
                           connect_timeout=config.connect_timeout)
        self.records: list[dict[str, Any]] = []
        self.msg_labels: dict[str, dict[str, Any]] = {}     # labeled runs: msg_id -> its label (JSON)
        self.trace: list[list[Any]] = []
        self.link_events: list[LinkEvent] = []
        self.refused = 0
        self.end = config.chaos + config.heal
        s = config.settings
        self.episodes = make_episodes(self.rng, names, config.chaos, config.faults,
                                      s.liveness_timeout, s.suspect_timeout, self.settings.relaying)
        if config.repair_faults:
            # Their own random stream: the other episodes of a seed stay what they were.
            self.episodes += make_repair_episodes(random.Random(f"repair-{seed}"), names, config.chaos,
                                                  config.repair_faults, s.suspect_timeout, s.repair_period)
        self.episodes += list(config.episodes)
        self.changes = compile_schedule(self.episodes, names)
        self.absent: list[tuple[str, str]] = []
        if config.topology is not None:
            present = {tuple(sorted(p)) for p in config.topology}
            self.absent = [(a, b) for i, a in enumerate(names) for b in names[i + 1:] if (a, b) not in present]
            gone = set(self.absent)
            self.changes = [ch for ch in self.changes if ch[1] != "link" or (ch[2], ch[3]) not in gone]
            for a, b in self.absent:
                self.net.set_link(a, b, DOWN)
                self.link_events.append(LinkEvent(0.0, a, b, DOWN))
        self.plan = LabelPlan.draw(random.Random(f"labels-{seed}"), names) if config.labels else None
        self.leaks = LeakWatch() if config.labels else None
        self.workload = make_workload(work_rng, names, self.end, config, self.plan,
                                      random.Random(f"labels-{seed}-sends"))
        if self.leaks is not None:
            self.net.tap = self._tap
        # Its own stream too: with every link paced (the default share) no draw is made.
        self.rates = paced_links(random.Random(f"paced-{seed}"), names, config.link_rate, config.paced_share)
        self.rng = random.Random(f"net-{seed}")
        self.net.rng = self.rng

    # -- running ----------------------------------------------------------------
    def run(self) -> SimResult:
        for name in self.names:
            self._start(name)
        for ch in self.changes:
            self.loop.at(ch[0], partial(self._apply, ch))
        for t, name, dests, payload, prec, ttl in self.workload:
            self.loop.at(t, partial(self._send, name, dests, payload, prec, ttl))
        self.loop.run_until(self.end)
        if not self.config.check:
            return SimResult(self.seed, self.config, self.records, self.trace, [],
                             {"events": self.loop.events, "refused": self.refused,
                              "bytes": sum(self.net.bytes_sent.values())})
        history = History(self.records, self.names, end=self.end)
        links = LinkTimeline(self.link_events, self.names,
                             max_hops=self.settings.max_hops if self.settings.relaying else None)
        bounds = self.config.bounds(self.models)
        violations = check_all(history, margin=self.config.margin,
                               settle=settle_with_window(self.config.settle, self.settings.announce_delay),
                               links=links, bounds=bounds, crashes_lose=not self.config.durable,
                               repair_window=self.config.repair_window(bounds))
        violations += check_expiry(self.records, skew=2 * self.config.skew)
        if self.leaks is not None:
            violations += self.leaks.violations + check_journal_labels(self.records)
        stats = measure(history, links, self.config)
        stats.update(events=self.loop.events, refused=self.refused,
                     bytes=sum(self.net.bytes_sent.values()),
                     compactions=sum(s.compactions for s in self.sites.values()))
        return SimResult(self.seed, self.config, self.records, self.trace, violations, stats)

    def _local(self, site: _Site, at_least: float | None = None) -> float:
        t = self.loop.now + site.skew
        if at_least is not None and t < at_least:
            t = at_least
        if t < site.last_local:
            t = site.last_local
        site.last_local = t
        return t

    def _apply(self, ch: tuple[Any, ...]) -> None:
        t = self.loop.now
        if ch[1] == "link":
            _, _, a, b, state = ch
            self.trace.append([round(t, 6), "link", a, b, state])
            self.link_events.append(LinkEvent(t, a, b, state))
            self.net.set_link(a, b, state)
        elif ch[1] == "crash":
            name = ch[2]
            self.trace.append([round(t, 6), "crash", name])
            self._crash(name)
        else:
            name = ch[2]
            self.trace.append([round(t, 6), "restart", name])
            self.net.restart(name)
            self._start(name)

    def _start(self, name: str) -> None:
        site = self.sites[name]
        site.inc += 1
        site.last_local = float("-inf")
        now = self._local(site)
        durable = self.config.durable
        rates = self.rates
        site.stack = SiteStack(name, self.names, self.settings, now=now, mission="sim",
                               incarnation=STREAM_ID if durable else site.inc, boot=site.inc,
                               first_seq=site.seq + 1, durable=durable,
                               rates=rates[name] if rates else None, link_rates=rates)
        self.records.append(J.record(J.START, site=name, at=self.loop.now, inc=site.inc))
        if self.plan is not None:
            self.records.append(self.plan.clearance_record(name, self.loop.now))
        if durable and site.disk:
            site.deliveries = DeliveryLog(1 << 30)
            site.deliveries.recover(site.disk)
            self._actions(site, site.stack.restore(site.disk, now))
        self._actions(site, site.stack.start(now))

    def _crash(self, name: str) -> None:
        site = self.sites[name]
        if site.stack is not None:
            site.seq = site.stack.msg_seq
        site.stack = None
        site.gen += 1
        site.timer_at = None
        self.records.append(J.record(J.CRASH, site=name, at=self.loop.now))
        self.net.crash(name)

    # -- workload -----------------------------------------------------------------
    def _send(self, name: str, dests: list[str] | None, payload: bytes, precedence: str = DEFAULT,
              ttl: float | None = None) -> None:
        site = self.sites[name]
        if site.stack is None:
            return
        others = [n for n in self.names if n != name]
        now = self._local(site)
        expires_at = now + ttl if ttl is not None else None
        try:
            result, actions = site.stack.send(payload, dests, now, precedence, expires_at)
        except (Backpressure, SendRefused):
            self.refused += 1
            return
        label = None
        if self.plan is not None and self.leaks is not None:
            lb = self.plan.label_of(payload)
            if lb is not None:
                label = self.msg_labels[result.msg_id] = lb.to_json()
            self.plan.expect(self.leaks, payload, name, dests)
        self.records.append(J.record(J.SEND, site=name, at=self.loop.now, msg_id=result.msg_id, origin=name,
                                     seq=result.seq, sent_at=self.loop.now, order=result.order,
                                     skipped=list(result.skipped),
                                     precedence=precedence if precedence != DEFAULT else None, label=label,
                                     expires_at=expires_at, dests=dests if dests is not None else others))
        self._actions(site, actions)

    # -- host callbacks (from the network) ---------------------------------------------
    def connection_made(self, name: str, conn: End, peer: str | None) -> None:
        site = self.sites[name]
        if site.stack is not None:
            self._actions(site, site.stack.connection_made(conn, self._local(site), peer=peer))

    def data_received(self, name: str, conn: End, data: bytes) -> None:
        site = self.sites[name]
        if site.stack is not None:
            self._actions(site, site.stack.data_received(conn, data, self._local(site)))

    def connection_lost(self, name: str, conn: End) -> None:
        site = self.sites[name]
        if site.stack is not None:
            self._actions(site, site.stack.connection_lost(conn, self._local(site)))

    def dial_failed(self, name: str, peer: str) -> None:
        site = self.sites[name]
        if site.stack is not None:
            self._actions(site, site.stack.dial_failed(peer, self._local(site)))

    # -- actions and timers ---------------------------------------------------------
    def _actions(self, site: _Site, actions: list[Any]) -> None:
        """Carry out rcm actions (``rcm.actions.Action``), dispatched on their exact type."""
        name = site.name
        at = self.loop.now
        for a in actions:
            t = type(a)
            if t is Transmit:
                self.net.write(name, a.conn, a.data)
            elif t is Delivery:
                if self.config.durable:
                    # Numbered and logged before the client sees it; the client
                    # processes it at once and acknowledges.
                    frame, record = site.deliveries.add(a)
                    site.disk += [record, site.deliveries.ack("sim", frame[1])]
                    if self.leaks is not None:
                        self._stored(name, site.disk[-2:])
                    site.deliveries.trim()
                    n, inc = frame[1], STREAM_ID
                else:
                    site.n += 1
                    n, inc = site.n, site.inc
                msg_id = f"{a.origin}:{a.seq}"
                label = None
                if self.leaks is not None:
                    self.leaks.delivered(name, a.payload, at)
                    # Read off what arrived (a stub has no payload: its send's label).
                    lb = self.plan.label_of(a.payload) if self.plan is not None and a.payload else None
                    label = lb.to_json() if lb is not None else self.msg_labels.get(msg_id)
                self.records.append(J.record(
                    J.DELIVER, site=name, n=n, at=at, msg_id=msg_id, origin=a.origin, seq=a.seq,
                    order=list(a.key), late=a.late, label=label,
                    precedence=a.precedence if a.precedence != DEFAULT else None,
                    repaired=True if a.repaired else None, expires_at=a.expires_at, inc=inc))
                if a.expired:
                    # A stub: the message is not lost (the delivery above counts it), its content went.
                    self.records.append(J.record(J.EXPIRED, site=name, at=at, msg_id=f"{a.origin}:{a.seq}",
                                                 origin=a.origin, seq=a.seq))
            elif t is Persist:
                site.disk.append(a.record)
                if self.leaks is not None:
                    self._stored(name, (a.record,))
            elif t is StatusChange:
                self.records.append(J.record(J.STATUS, site=name, at=at, peer=a.peer, status=a.status,
                                             inc=site.inc))
            elif t is Close:
                self.net.close(name, a.conn)
            elif t is Dial:
                self.net.dial(name, a.peer)
            elif t is Missing:
                # As the chat server journals it: ranges in bounded records, seqs only when few.
                for batch, listed in missing_records(normalize(a.ranges)):
                    self.records.append(J.record(J.MISSING, site=name, at=at, origin=a.origin,
                                                 **J.missing_fields(batch, listed)))
        # The server's rule (rcm.stack.recovery), counted in records here.
        if (self.config.durable and site.stack is not None
                and compaction_due(len(site.disk), self.config.compact_every, site.compacted)):
            site.disk = compacted(site.stack, site.deliveries)
            if self.leaks is not None:
                self._stored(name, site.disk, "compacted log record")
            site.compacted = len(site.disk)
            site.compactions += 1
        self._arm(site)

    def _tap(self, name: str, conn: int, data: bytes) -> None:
        """Labeled runs: every write on the network, shown to the leak checker with its receiver."""
        c = self.net.conns[conn]
        if self.leaks is not None:
            self.leaks.written(name, c.b if c.a == name else c.a, conn, data, self.loop.now)

    def _stored(self, name: str, records: Sequence[Record], what: str = "log record") -> None:
        """Labeled durable runs: records written to a site's disk, shown to the leak checker."""
        if self.leaks is not None:
            for r in records:
                self.leaks.stored(name, msgpack.packb(encode_record(r), use_bin_type=True), self.loop.now, what)

    def _arm(self, site: _Site) -> None:
        stack = site.stack
        if stack is None:
            return
        d = stack.next_deadline()
        if d is None:
            return
        v = d - site.skew
        if site.timer_at is not None and site.timer_at <= v:
            return
        site.gen += 1
        site.timer_at = v
        gen = site.gen
        self.loop.at(v, lambda: self._fire(site, gen, d))

    def _fire(self, site: _Site, gen: int, deadline: float) -> None:
        if gen != site.gen or site.stack is None:
            return
        site.timer_at = None
        now = self._local(site, at_least=deadline)
        if self.loop.now == site.last_fire:
            site.spins += 1
            if site.spins > 10_000:
                raise SimError(f"timer livelock at site {site.name}, deadline {deadline}")
        else:
            site.spins = 0
            site.last_fire = self.loop.now
        self._actions(site, site.stack.timer(now))


def simulate(seed: int, config: SimConfig) -> SimResult:
    """Run one seeded simulation and check it."""
    return Simulation(seed, config).run()

