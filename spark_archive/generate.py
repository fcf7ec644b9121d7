"""Synthetic mission journals for the archive (``python -m spark_archive.generate``).

Theory of operation
-------------------
The generator simulates a mission at the level the journals record, not packet
by packet, with one seeded ``numpy`` generator so a seed replays the mission:

* Every pair of sites has a link with random outages (a Poisson number per
  pair, log-normal lengths). An outage makes both ends journal ``suspected``
  a few seconds in (liveness timeout), ``disconnected`` if it outlasts the
  suspect timeout, and ``connected`` when the link is back. One site can be
  *isolated* (never connects to anyone) and one can be *empty* (its journal
  file exists but holds nothing).
* Messages are sent at random times by random sites into a few rooms. Order
  keys are Lamport keys ``[timestamp, origin]``: a send ticks the origin's
  clock past everything it has heard from sites connected to it, and a
  delivery raises the receiver's clock, so keys follow real time within a
  connected component and drift apart across a partition.
* A message reaches a destination after a log-normal network delay plus a
  hold-back time while the link is up. Sent during an outage it is resent when
  the link comes back; if the outage turned into ``disconnected`` it is lost
  with some probability and the destination journals a ``missing`` record.
  A site delivers messages in arrival order; a delivery whose key is below the
  largest key the site has already delivered is flagged ``late``.
* Some sites restart once: the old journal file ends with a torn line, the new
  file re-journals the last records of the old one (exact duplicates) and
  re-delivers a few messages with new delivery counts ``n``. A few final
  lines are torn as well.
* With ``--positions UNITS``, each site's units report their positions
  (``spark_archive.generate_positions``): journaled at the origin and at
  every site they reach, the reports made during an outage superseded by the
  last of them.

Output: ``OUT/<site>/journal/NNNN.jsonl`` (Contract 3), plus ``OUT/generator.json``
describing what was injected (counts of records, torn lines, duplicates).

This module draws the messages (chat and control, their content and the Contract 3
extensions) and what reaches each site; ``spark_archive.generate_network`` holds the
network model (sites, link outages and status records, Lamport keys, delivery order
at one site), ``spark_archive.generate_files`` the journal files (restarts, torn lines).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from contracts import journal as J
from contracts.precedence import PRECEDENCES, Precedence
from spark_archive import generate_labels
from spark_archive.generate_files import seconds_text, seconds_texts, write_journals
from spark_archive.generate_network import (
    MissionPlan,
    delivery_order,
    lamport_keys,
    link_pair,
    plan_links,
    site_names,
    status_records,
)
from spark_archive.generate_positions import position_records

ROOMS = ["ops", "intel", "logistics", "weather", "fires"]
WORDS = ("track contact bearing angels request confirm holding tanker orbit fuel "
         "target weather ceiling visibility medevac priority grid north south east west "
         "copy wilco negative affirm standby checkpoint package strike egress ingress "
         "bingo winchester picture clean hostile friendly unknown").split()


@dataclass(frozen=True)
class Extensions:
    """Contract 3 extensions the generator writes (all off by default: the journals are then
    those of the paper's protocol)."""

    precedence: float = 0.0   # share of messages above routine: flash 20%, immediate 30%, priority 50%
    relay: float = 0.0        # share of deliveries to other sites that went through a relay
    repair: float = 0.0       # share of messages lost across a disconnection that are repaired later
    control: float = 0.0      # control messages (rosters, receipts) per chat message
    acks: float = 0.0         # chance that a site acknowledges a flash or immediate message it delivered
    positions: int = 0        # units per site reporting their positions (second round; generate_positions.py)
    labels: bool = False      # security labels: clearances, labeled messages sent by need to know (generate_labels.py)


# Every extension, at shares that show each of them in a small mission; ``POSITIONS``: every extension and
# positions (kept apart so that the journals the archive tests already know keep their lines; the chat
# server's journal writes both, tests/contracts/test_journal_producers.py).
EXTENDED = Extensions(precedence=0.15, relay=0.2, repair=0.5, control=0.3, acks=0.6)
POSITIONS = dataclasses.replace(EXTENDED, positions=2)
URGENT_LEVELS = (0.2, 0.3, 0.5)   # shares of flash, immediate, priority (codes 0, 1, 2) among non-routine messages
ROUTINE = Precedence.ROUTINE.code
URGENT_CODES = [p.code for p in Precedence if p.urgent]

# The lines, formatted from the journal schema's names and order (contracts.journal), with the
# generator's own placeholders filled in once: a site or origin is a call sign and a msg_id
# "<origin>:<seq>" (JSON text without escapes), a time is ``seconds_texts``' text, and the fields
# every line of a message shares (msg_id to order; room to precedence) are formatted once per
# message. Each line is what ``contracts.journal.dumps`` writes (tests/spark_archive/test_generate.py).
_IDENT = J.fragment_format(J.DELIVER, "msg_id", "origin", "seq", "order") % ('"%s:%d"', '"%s"', "%d", '[%d,"%s"]')
_BODY = J.fragment_format(J.DELIVER, "room", "user", "text", "sent_at")
_PRECEDENCE = J.fragment_format(J.DELIVER, "precedence") % '"%s"'
_SEND = J.line_format(J.SEND, "site", "at", ("msg_id", "origin", "seq"), ("room", "user", "text", "sent_at"),
                      ("order",), ("precedence",), ("label",)) % ('"%s"', "%s", "%s", "%s", "%s", "%s", "%s")
_SEND_IDENT = J.fragment_format(J.SEND, "msg_id", "origin", "seq") % ('"%s:%d"', '"%s"', "%d")
_ORDER = J.fragment_format(J.SEND, "order") % '[%d,"%s"]'
_DELIVER = J.line_format(J.DELIVER, "site", "n", "at", ("msg_id", "origin", "seq", "order"), "late",
                         ("room", "user", "text", "sent_at", "precedence"), ("via",), ("repaired",), ("label",)
                         ) % ('"%s"', "%d", "%s", "%s", "%s", "%s", "%s", "%s", "%s")
_VIA = J.fragment_format(J.DELIVER, "via")
_REPAIRED = J.fragment_format(J.DELIVER, "repaired") % "true"
_CONTROL = J.line_format(J.CONTROL, "site", "at", ("msg_id", "origin", "seq", "order"), "late"
                         ) % ('"%s"', "%s", "%s", "%s")
_ACKNOWLEDGE = J.line_format(J.ACKNOWLEDGE, "site", "at", "msg_id", "user") % ('"%s"', "%s", '"%s:%d"', '"%s-op%d"')


def generate(out: Path, sites: int, messages: int, seed: int, *,
             duration: float | None = None, restart_prob: float = 0.5,
             torn_prob: float = 0.2, isolated: int | None = None, empty: int | None = None,
             outages_per_hour: float = 2.0, loss_prob: float = 0.6,
             start: float = 1_767_225_600.0, extensions: Extensions = Extensions()) -> dict[str, Any]:
    """Write synthetic journals under ``out``; return what was injected."""
    if sites < 1 or messages < 0:
        raise ValueError("need at least one site and a non-negative message count")
    rng = np.random.default_rng(seed)
    ext = extensions
    # The extensions draw from a stream of their own: a seed gives the same chat messages,
    # outages and losses with or without them.
    xrng = np.random.default_rng([seed, 24])
    names = site_names(sites)
    if duration is None:
        duration = float(min(max(600.0, messages / 20.0), 6 * 3600.0))
    if isolated is None:
        isolated = 1 if sites >= 4 else 0
    if empty is None:
        empty = 1 if sites >= 6 else 0
    mission = MissionPlan(names, start, start + duration)
    special = rng.permutation(sites)[: isolated + empty].tolist()
    mission.isolated = set(special[:isolated])
    mission.empty = set(special[isolated:isolated + empty])
    plan_links(rng, mission, outages_per_hour)

    senders = np.array([s for s in range(sites) if s not in mission.empty], dtype=np.int64)
    weights = rng.uniform(0.5, 2.0, len(senders))
    for k, s in enumerate(senders):
        if s in mission.isolated:
            weights[k] *= 0.05  # an isolated site says little
    weights /= weights.sum()
    chat_times = np.sort(rng.uniform(mission.start + 10, mission.end - 10, messages))
    chat_origins = senders[rng.choice(len(senders), messages, p=weights)] if messages else \
        np.empty(0, dtype=np.int64)
    # Control messages share the origins' sequence numbers and the global order with chat.
    controls = int(round(ext.control * messages)) if len(senders) else 0
    ctl_times = np.sort(xrng.uniform(mission.start + 10, mission.end - 10, controls))
    ctl_origins = senders[xrng.choice(len(senders), controls, p=weights)] if controls else \
        np.empty(0, dtype=np.int64)
    by_time = np.argsort(np.concatenate([chat_times, ctl_times]), kind="stable")
    times = np.concatenate([chat_times, ctl_times])[by_time]
    origins = np.concatenate([chat_origins, ctl_origins])[by_time]
    chat_of = np.concatenate([np.arange(messages), np.full(controls, -1)])[by_time]  # -1: control
    is_ctl = chat_of < 0
    items = messages + controls
    stamps = lamport_keys(mission, times, origins)
    seqs = np.zeros(items, dtype=np.int64)
    counters = np.zeros(sites, dtype=np.int64)
    for i, o in enumerate(origins.tolist()):
        counters[o] += 1
        seqs[i] = counters[o]
    rooms = rng.integers(0, len(ROOMS), messages)
    users = rng.integers(1, 6, messages)
    word_idx = rng.integers(0, len(WORDS), (messages, 6))
    lengths = rng.integers(2, 7, messages)
    # Each message's precedence code (contracts.precedence: 0 flash .. 3 routine).
    prec = np.full(items, ROUTINE, dtype=np.int64)
    if ext.precedence > 0:
        raised = xrng.random(items) < ext.precedence
        drawn = xrng.choice(3, items, p=URGENT_LEVELS)
        prec = np.where(raised & ~is_ctl, drawn, ROUTINE)
    urgent = np.isin(prec, URGENT_CODES)
    # Sortable integer form of the key (timestamp, origin): sites are sorted by name.
    keys = stamps * 4096 + origins
    # Labels draw from a stream of their own too; a message reaches only the sites cleared for it.
    labels = generate_labels.plan_labels(np.random.default_rng([seed, 51]), sites, origins, is_ctl) \
        if ext.labels else None
    label_text = labels.texts if labels else [""] * items

    # Per message JSON fragments shared by its send and all its deliveries.
    ident = []
    body = []
    sent_at = seconds_texts(times)
    records: list[list[tuple[float, str]]] = status_records(rng, mission)
    if labels:
        for d in range(sites):
            if d not in mission.empty:
                records[d].append((mission.start, generate_labels.clearance_line(names[d], mission.start,
                                                                                 labels.clearances[d])))
    text_of = J.value_text
    for i in range(items):
        o = names[origins[i]]
        ident.append(_IDENT % (o, seqs[i], o, seqs[i], stamps[i], o))
        c = chat_of[i]
        if c < 0:
            body.append("")
            continue
        words = " ".join(WORDS[w] for w in word_idx[c, : lengths[c]])
        content = _BODY % (text_of(ROOMS[rooms[c]]), text_of(f"{o.lower()}-op{users[c]}"), text_of(words),
                           sent_at[i])
        # (routine is left out, as chat servers do)
        level = _PRECEDENCE % PRECEDENCES[prec[i]] if prec[i] != ROUTINE else ""
        body.append(content + level)
        records[origins[i]].append((float(times[i]), _SEND % (
            o, sent_at[i], _SEND_IDENT % (o, seqs[i], o, seqs[i]), content, _ORDER % (stamps[i], o), level,
            label_text[i])))

    injected = {"messages": messages, "deliveries": 0, "late": 0, "lost": 0,
                "missing_records": 0, "restarts": 0, "duplicate_lines": 0,
                "redeliveries": 0, "torn_lines": 0, "control_messages": controls,
                "control_deliveries": 0, "urgent_messages": int(urgent.sum()), "relayed": 0,
                "repaired": 0, "acknowledgements": 0, "units": 0, "position_reports": 0, "position_lines": 0}
    if labels:
        injected["withheld"] = 0    # (message, site) pairs a message was not addressed to: no loss
    relays = [s for s in range(sites) if s not in mission.isolated | mission.empty]
    # A delivery's via: its relay (by site index) or none (index -1: the last).
    via_texts = [_VIA % J.value_text([name]) for name in names] + [_VIA % "[]"]
    for d in range(sites):
        if d in mission.empty:
            continue
        at = np.full(items, np.nan)
        delayed = np.zeros(items, dtype=bool)  # sent during an outage, resent after it
        repaired = np.zeros(items, dtype=bool)
        via = np.full(items, -1, dtype=np.int64)
        own = origins == d
        at[own] = times[own] + rng.uniform(0.02, 0.3, int(own.sum()))
        missing: dict[tuple[int, float], list[int]] = {}
        for o in range(sites):
            if o == d:
                continue
            sel = np.nonzero(origins == o)[0]
            if len(sel) == 0:
                continue
            t = times[sel]
            addressed = labels.addressed[sel, d] if labels else None
            arrive = t + rng.lognormal(np.log(0.12), 0.6, len(sel)) + rng.uniform(0.05, 0.25, len(sel))
            spans = mission.outages[link_pair(o, d)]
            inside = np.zeros(len(sel), dtype=bool)
            never = {o, d} & (mission.isolated | mission.empty)
            if spans:
                starts = np.array([s.start for s in spans])
                ends = np.array([s.end for s in spans])
                disc = np.array([s.disconnected for s in spans])
                span = np.searchsorted(starts, t, side="right") - 1
                inside = (span >= 0) & (t < ends[np.maximum(span, 0)])
                kk = np.maximum(span, 0)
                resent = ends[kk] + rng.uniform(0.2, 3.0, len(sel))
                lost = inside & disc[kk] & ((rng.random(len(sel)) < loss_prob) | bool(never))
                if not never:   # control payloads are resent (or never sent: no missing report)
                    lost &= ~is_ctl[sel]
                if addressed is not None:   # never sent here: neither lost nor reported missing
                    lost &= addressed
                arrive = np.where(inside, resent, arrive)
                if ext.repair > 0 and not never:
                    # Fetched from a site that holds it, after the site reported it missing.
                    fixed = lost & (xrng.random(len(sel)) < ext.repair)
                    arrive = np.where(fixed, ends[kk] + 3.5 + xrng.uniform(1.0, 20.0, len(sel)), arrive)
                    repaired[sel] = fixed
                    lost &= ~fixed
                arrive[lost] = np.nan
                delayed[sel] = inside
                if not never:
                    for j in np.nonzero(lost | repaired[sel])[0].tolist():
                        missing.setdefault((o, float(ends[kk[j]])), []).append(int(seqs[sel[j]]))
            if ext.relay > 0 and not never:
                hop = [r for r in relays if r not in (o, d)]
                relayed = ~inside & (xrng.random(len(sel)) < ext.relay) if hop else np.zeros(len(sel), bool)
                via[sel[relayed]] = np.array(hop)[xrng.integers(0, max(len(hop), 1), int(relayed.sum()))]
                arrive = np.where(relayed, arrive + xrng.lognormal(np.log(0.12), 0.6, len(sel)), arrive)
                if labels:      # relayed only through a site the message is addressed to
                    via[sel[relayed & ~labels.addressed[sel, via[sel]]]] = -1
            if addressed is not None:
                arrive = np.where(addressed, arrive, np.nan)
            at[sel] = arrive
        got, late = delivery_order(at, delayed | repaired | urgent, keys, urgent)
        chat_got = ~is_ctl[got]
        injected["deliveries"] += int(chat_got.sum())
        injected["control_deliveries"] += int((~chat_got).sum())
        injected["late"] += int(late[chat_got].sum())
        withheld = int((~labels.addressed[:, d] & ~is_ctl).sum()) if labels else 0
        injected["lost"] += messages - int(chat_got.sum()) - withheld
        if labels:
            injected["withheld"] += withheld
        site = names[d]
        recs = records[d]
        n = 0
        for i, is_late, when in zip(got.tolist(), late.tolist(), seconds_texts(at[got])):
            flag = "true" if is_late else "false"
            if is_ctl[i]:
                recs.append((float(at[i]), _CONTROL % (site, when, ident[i], flag)))
                continue
            n += 1
            relay_text = ""
            if ext.relay > 0:
                relay_text = via_texts[via[i]]
                injected["relayed"] += int(via[i] >= 0)
            fixed = ""
            if repaired[i]:
                fixed = _REPAIRED
                injected["repaired"] += 1
            recs.append((float(at[i]), _DELIVER % (site, n, when, ident[i], flag, body[i], relay_text, fixed,
                                                   label_text[i])))
            if labels:
                labels.traffic[str(labels.labels[i])] += 1
            if urgent[i] and ext.acks > 0 and xrng.random() < ext.acks:
                acked = float(at[i] + xrng.lognormal(np.log(4.0), 0.7))
                recs.append((acked, _ACKNOWLEDGE % (site, seconds_text(acked), names[origins[i]], seqs[i],
                                                    site.lower(), xrng.integers(1, 6))))
                injected["acknowledgements"] += 1
        for (o, end), lost_seqs in sorted(missing.items()):
            for c in range(0, len(lost_seqs), 500):
                report_at = end + 3.5
                # As a chat server writes it (Contract 3, second round): ranges and count, and
                # seqs too, since a record of at most 10,000 messages lists them.
                ranges = J.missing_ranges(None, lost_seqs[c:c + 500])
                recs.append((report_at, J.dumps(J.record(J.MISSING, site=site, at=round(report_at, 6), origin=names[o],
                                                    **J.missing_fields(ranges)))))
                injected["missing_records"] += 1

    if ext.positions > 0:
        # A stream of their own: the same seed gives the same chat with or without them.
        injected.update(position_records(np.random.default_rng([seed, 39]), mission, ext.positions, records))
    write_journals(out, rng, names, records, mission.empty, restart_prob, torn_prob, injected)
    summary = {"sites": names, "isolated": sorted(names[i] for i in mission.isolated),
               "empty": sorted(names[i] for i in mission.empty), "seed": seed,
               "start": mission.start, "end": mission.end, **injected}
    if labels:
        summary.update(generate_labels.summary(labels, Counter(str(lb) for lb in labels.labels if lb is not None)))
    (out / "generator.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m spark_archive.generate",
                                     description="Write realistic synthetic mission journals.")
    parser.add_argument("--sites", type=int, required=True, help="number of sites")
    parser.add_argument("--messages", type=int, required=True, help="number of messages sent")
    parser.add_argument("--seed", type=int, default=1, help="random seed (replays the mission)")
    parser.add_argument("--out", default="var/synthetic", help="mission data_dir to write")
    parser.add_argument("--duration", type=float, default=None, help="mission length in seconds")
    parser.add_argument("--restart-prob", type=float, default=0.5)
    parser.add_argument("--torn-prob", type=float, default=0.2)
    parser.add_argument("--isolated", type=int, default=None, help="sites that never connect")
    parser.add_argument("--empty", type=int, default=None, help="sites with an empty journal")
    ext = parser.add_argument_group("Contract 3 extensions (off by default)")
    ext.add_argument("--extended", action="store_true",
                     help="all of them at once: --precedence 0.15 --relay 0.2 --repair 0.5 "
                          "--control 0.3 --acks 0.6 (the options below override)")
    ext.add_argument("--precedence", type=float, default=None, metavar="SHARE",
                     help="share of messages above routine (flash 20%%, immediate 30%%, priority 50%%)")
    ext.add_argument("--relay", type=float, default=None, metavar="SHARE",
                     help="share of deliveries to other sites that went through a relay (via)")
    ext.add_argument("--repair", type=float, default=None, metavar="SHARE",
                     help="share of messages lost across a disconnection that are repaired later")
    ext.add_argument("--control", type=float, default=None, metavar="RATIO",
                     help="control messages (rosters, receipts) per chat message")
    ext.add_argument("--acks", type=float, default=None, metavar="CHANCE",
                     help="chance that a site acknowledges a flash or immediate message")
    ext.add_argument("--labels", action="store_true", default=None,
                     help="a labeled mission: site clearances, labeled messages reaching only the sites cleared "
                          "for them (not in --extended)")
    ext.add_argument("--positions", type=int, default=None, metavar="UNITS",
                     help="units per site reporting their positions every 3 to 7 s (not in --extended)")
    def refuse(message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    parser.error = refuse  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    if args.sites < 1 or args.messages < 0:
        print("error: --sites must be >= 1 and --messages >= 0", file=sys.stderr)
        return 2
    if (args.isolated or 0) + (args.empty or 0) >= args.sites and args.sites > 1:
        print("error: --isolated plus --empty must leave at least one ordinary site", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() and any(out.rglob("*.jsonl")):
        print(f"error: {out} already holds journals; choose an empty --out", file=sys.stderr)
        return 2
    base = EXTENDED if args.extended else Extensions()
    chosen = {name: getattr(args, name) for name in ("precedence", "relay", "repair", "control", "acks",
                                                     "positions", "labels") if getattr(args, name) is not None}
    if any(v < 0 or (v > 1 and name not in ("control", "positions")) for name, v in chosen.items()):
        print("error: extension shares must be between 0 and 1 (--control, --positions: >= 0)", file=sys.stderr)
        return 2
    summary = generate(out, args.sites, args.messages, args.seed, duration=args.duration,
                       restart_prob=args.restart_prob, torn_prob=args.torn_prob,
                       isolated=args.isolated, empty=args.empty,
                       extensions=dataclasses.replace(base, **chosen))
    records = sum(1 for _ in out.rglob("*.jsonl"))
    print(f"wrote {records} journal files for {len(summary['sites'])} sites under {out}: "
          f"{summary['messages']} messages, {summary['deliveries']} deliveries "
          f"({summary['late']} late, {summary['lost']} never arrived), "
          f"{summary['restarts']} restarts, {summary['torn_lines']} torn lines"
          + (f"; {summary['control_messages']} control messages, {summary['urgent_messages']} flash or "
             f"immediate, {summary['relayed']} relayed and {summary['repaired']} repaired deliveries, "
             f"{summary['acknowledgements']} acknowledgements" if base != Extensions() or chosen else "")
          + (f"; {summary['position_reports']} position reports of {summary['units']} units "
             f"({summary['position_lines']} lines)" if summary["units"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
