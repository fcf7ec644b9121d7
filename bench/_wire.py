"""Where a benchmark's inter-site bytes go: the RCM sites' ``wire`` stats (``rcm.server.outbox.WireMeter``).

Each site counts what its inter-site connections wrote: the stack's frames
per kind (as written, before compression), the codec's output, the TLS
records carrying it and their count, other socket bytes (TLS handshakes and
tickets: reconnections), and the socket writes beside the stack's sends. A
benchmark takes the sites' stats before and after a phase (``wire_stats``,
``wire_diff``) and divides by its message copies (``composition``):

* ``frames``: RCM frame bytes per kind, ``rcm_frames`` their sum;
* ``compression``: what the link codec took off (negative);
* ``tls_records``: the records' overhead (22 B each with TLS 1.3's AES-GCM);
* ``tls_handshakes``: handshake flights and tickets;
* ``unaccounted``: what the proxies carried beyond what the sites wrote
  (negative: written but lost in a cut link).

Used by ``bench/hf.py`` and ``bench/peer_irc_outage.py``.
"""
from __future__ import annotations

from typing import Any

from rcm.client import RcmClient


def wire_sum(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The sites' ``wire`` stats (rcm.server.outbox.WireMeter) added up."""
    out: dict[str, Any] = {"kinds": {}}
    for st in stats:
        w = st["wire"]
        for k, v in w.items():
            if k == "kinds":
                for kind, (n, b) in v.items():
                    n0, b0 = out["kinds"].get(kind, (0, 0))
                    out["kinds"][kind] = (n0 + n, b0 + b)
            else:
                out[k] = out.get(k, 0) + v
    return out


def wire_diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    kinds = {k: (n - before["kinds"].get(k, (0, 0))[0], b - before["kinds"].get(k, (0, 0))[1])
             for k, (n, b) in after["kinds"].items()}
    return {"kinds": {k: v for k, v in kinds.items() if v[0]},
            **{k: v - before.get(k, 0) for k, v in after.items() if k != "kinds"}}


async def wire_stats(rcms: dict[str, RcmClient]) -> dict[str, Any]:
    return wire_sum([await c.stats() for c in rcms.values()])


def composition(w: dict[str, Any], proxies: int, copies: float) -> dict[str, Any]:
    """Bytes per message copy (or per message: ``copies`` is the divisor) by where they go (module docstring);
    ``proxies``: what the link proxies carried over the same time."""
    per = copies if copies > 0 else 1
    sites = w["record_bytes"] + w["raw"]
    return {"frames": {k: round(b / per, 1) for k, (_, b) in sorted(w["kinds"].items(), key=lambda x: -x[1][1])},
            "frames_per_copy": {k: round(n / per, 2) for k, (n, _) in w["kinds"].items()},
            "rcm_frames": round(w["plain"] / per, 1), "compression": round((w["coded"] - w["plain"]) / per, 1),
            "tls_records": round((w["record_bytes"] - w["coded"]) / per, 1),
            "tls_handshakes": round(w["raw"] / per, 1), "unaccounted": round((proxies - sites) / per, 1),
            "sends_per_copy": round(w["sends"] / per, 2), "writes_per_copy": round(w["writes"] / per, 2),
            "records_per_copy": round(w["records"] / per, 2)}


def composition_line(label: str, c: dict[str, Any]) -> str:
    """One line of ``composition``'s figures, after ``label``."""
    kinds = ", ".join(f"{k} {v:.0f}" for k, v in c["frames"].items() if v >= 0.5)
    return (f"{label}: RCM frames {c['rcm_frames']:.0f} ({kinds}), compression "
            f"{c['compression']:+.0f}, TLS records {c['tls_records']:+.0f} ({c['records_per_copy']:.1f} records, "
            f"{c['writes_per_copy']:.1f} writes for the stack's {c['sends_per_copy']:.1f} sends), TLS handshakes "
            f"{c['tls_handshakes']:+.0f}, unaccounted {c['unaccounted']:+.0f}")
