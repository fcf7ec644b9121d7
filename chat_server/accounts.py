"""Passwords (scrypt, memory-hard), the failed-login rate limiter, and the accounts' roles.

A password hash is stored as ``scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>`` so a
change of ``[chat] kdf_n`` applies to new hashes and old ones keep verifying.
The rate limiter is pure: callers pass ``now``; tests drive it on a virtual clock.
An account's roles (``Roles``: names such as ``flash``, which ``[chat]
flash_role`` asks of whoever sends FLASH, see urgent.py) live beside it in the
site's chat database; ``adduser --role`` and ``roles --grant/--revoke`` write
them, and the server reads them at each use, so a change needs no restart. So do the
accounts' clearances (``Clearances``, security labels: the most an account may
read and send; ``adduser --clearance`` and ``clearance``).
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
from collections import deque
from collections.abc import Callable, Iterable

from contracts.labels import Label, LabelError, Scheme, meet

SCRYPT_R = 8
CLEARANCES_CACHED = 100_000     # accounts' clearances kept read (then the cache starts again)
SCRYPT_P = 1
SALT_BYTES = 16
KEY_BYTES = 32


def hash_password(password: str, n: int) -> str:
    """A salted scrypt hash of ``password`` (n: CPU/memory cost, power of two)."""
    salt = secrets.token_bytes(SALT_BYTES)
    key = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=SCRYPT_R, p=SCRYPT_P,
                         maxmem=256 * SCRYPT_R * n + (1 << 20), dklen=KEY_BYTES)
    return f"scrypt${n}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${key.hex()}"


def verify_password(password: str, stored: str) -> bool:
    """True if ``password`` matches the stored hash (constant-time compare)."""
    try:
        scheme, n_s, r_s, p_s, salt_hex, key_hex = stored.split("$")
        n, r, p = int(n_s), int(r_s), int(p_s)
        salt, key = bytes.fromhex(salt_hex), bytes.fromhex(key_hex)
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    got = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p,
                         maxmem=256 * r * n + (1 << 20), dklen=len(key))
    return hmac.compare_digest(got, key)


# A hash to verify against when the user does not exist, so that a missing user
# costs the same time as a wrong password.
def dummy_hash(n: int) -> str:
    return hash_password(secrets.token_hex(8), n)


def new_session_token() -> str:
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """Sessions are stored by digest, so a copy of the database does not hand out sessions."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class LoginLimiter:
    """Slows a key (a user, an address, a user at an address) down after failed logins.

    ``max_failures`` failures within ``window`` seconds make the key wait 1 s before its next
    attempt; every further failure in the window doubles the wait, up to ``lockout`` seconds. There
    is no hard lock: a key that stops failing is free again within ``lockout`` (audit row 9, a hard
    lock let anyone lock a named user out). ``failed`` may be called before the password is checked
    (so a parallel burst counts at once, audit row 10) and ``forgive`` takes that failure back when
    the password was right; ``succeeded`` clears the key. Each table keeps at most ``max_keys`` keys.
    """

    def __init__(self, max_failures: int, window: float, lockout: float, max_keys: int = 10_000) -> None:
        self.max_failures = max_failures
        self.window = window
        self.lockout = lockout
        self.max_keys = max_keys
        self._failures: dict[str, deque[float]] = {}
        self._blocked_until: dict[str, float] = {}

    def retry_after(self, key: str, now: float) -> float:
        """Seconds until ``key`` may try again (0.0: allowed now)."""
        until = self._blocked_until.get(key)
        if until is None:
            return 0.0
        if now >= until:
            del self._blocked_until[key]
            return 0.0
        return until - now

    def failed(self, key: str, now: float) -> None:
        q = self._failures.setdefault(key, deque())
        q.append(now)
        while q and q[0] <= now - self.window:
            q.popleft()
        over = len(q) - self.max_failures
        if over >= 0:
            self._blocked_until[key] = now + min(self.lockout, 2.0 ** min(over, 32))
        if len(self._failures) > self.max_keys:   # forget stale keys so the table stays bounded
            for k in [k for k, v in self._failures.items() if not v or v[-1] <= now - self.window]:
                del self._failures[k]
            while len(self._failures) > self.max_keys:
                del self._failures[next(iter(self._failures))]
        if len(self._blocked_until) > self.max_keys:
            for k in [k for k, t in self._blocked_until.items() if t <= now]:
                del self._blocked_until[k]
            over = len(self._blocked_until) - self.max_keys
            if over > 0:            # still over (many keys failing at once): forget the waits that end soonest
                for k in sorted(self._blocked_until, key=self._blocked_until.__getitem__)[:over]:
                    del self._blocked_until[k]

    def forgive(self, key: str) -> None:
        """Take back the last failure of ``key`` (recorded before a check that then succeeded)."""
        q = self._failures.get(key)
        if q:
            q.pop()

    def succeeded(self, key: str) -> None:
        self._failures.pop(key, None)
        self._blocked_until.pop(key, None)


ROLE_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
"""A role: a lowercase letter, then lowercase letters, digits, '_', '.', '-' (at most 32)."""


def role_names(values: Iterable[str]) -> list[str]:
    """Roles as given on a command line (repeated, or comma-separated), checked; ValueError names a bad one."""
    out: list[str] = []
    for v in values:
        for name in v.split(","):
            name = name.strip()
            if not ROLE_NAME.match(name):
                raise ValueError(f"role {name!r} must match {ROLE_NAME.pattern}")
            if name not in out:
                out.append(name)
    return out


class Roles:
    """The roles of a site's accounts, in its chat database beside the accounts (table ``roles``)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        db.execute("CREATE TABLE IF NOT EXISTS roles (user TEXT NOT NULL, role TEXT NOT NULL, "
                   "PRIMARY KEY (user, role))")

    def of(self, user: str) -> frozenset[str]:
        """The roles ``user`` holds now."""
        return frozenset(r for (r,) in self.db.execute("SELECT role FROM roles WHERE user = ?", (user,)))

    def grant(self, user: str, roles: Iterable[str]) -> None:
        for r in roles:
            self.db.execute("INSERT OR IGNORE INTO roles (user, role) VALUES (?, ?)", (user, r))

    def revoke(self, user: str, roles: Iterable[str]) -> None:
        for r in roles:
            self.db.execute("DELETE FROM roles WHERE user = ? AND role = ?", (user, r))

    def table(self) -> dict[str, list[str]]:
        """Every account that holds a role: user -> its roles, sorted."""
        out: dict[str, list[str]] = {}
        for user, role in self.db.execute("SELECT user, role FROM roles ORDER BY user, role"):
            out.setdefault(user, []).append(role)
        return out


class Clearances:
    """The clearances of a site's accounts, in its chat database beside the accounts (table ``clearances``).

    An account's clearance is a ``contracts.labels.Label``, stored as people write it, at most its site's
    clearance (``set`` refuses more). An account without a row (made before labels existed, or in an
    unlabeled mission) holds the mission's default label. A stored clearance the mission no longer allows (its
    file changed since) reads as what both allow (``meet`` with the site's), or the default label if the scheme
    cannot read it. ``adduser --clearance`` and ``clearance`` write it; the server reads it at each use, so a
    change applies to the account's next request (no restart).

    Reads are cached (a fan-out asks for every recipient): the cache is emptied whenever another connection
    committed a change to the database (SQLite's ``PRAGMA data_version``: the command lines write through
    their own), or ``set`` wrote through this one. ``current`` checks once for a batch of reads."""

    def __init__(self, db: sqlite3.Connection, scheme: Scheme, site_clearance: Label) -> None:
        self.db = db
        self.scheme = scheme
        self.site_clearance = site_clearance
        self._cache: dict[str, Label] = {}
        self._version = -1
        db.execute("CREATE TABLE IF NOT EXISTS clearances (user TEXT PRIMARY KEY, label TEXT NOT NULL)")

    def _fresh(self) -> None:
        version = self.db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version or len(self._cache) > CLEARANCES_CACHED:
            self._cache.clear()
            self._version = version

    def current(self) -> Callable[[str], Label]:
        """Each user's clearance as of now, for a batch of reads (one freshness check)."""
        self._fresh()
        return self._of

    def of(self, user: str) -> Label:
        """The clearance ``user`` holds now."""
        self._fresh()
        return self._of(user)

    def _of(self, user: str) -> Label:
        got = self._cache.get(user)
        if got is None:
            got = self._cache[user] = self._read(user)
        return got

    def _read(self, user: str) -> Label:
        row = self.db.execute("SELECT label FROM clearances WHERE user = ?", (user,)).fetchone()
        if row is None or not self.scheme.enabled:
            return self.scheme.default
        try:
            held = self.scheme.parse(row[0])
        except LabelError:
            return self.scheme.default
        return held if self.site_clearance.dominates(held) else meet([held, self.site_clearance])

    def set(self, user: str, clearance: Label) -> None:
        """Give ``user`` ``clearance``; ``LabelError`` if it is above the site's."""
        if not self.site_clearance.dominates(clearance):
            raise LabelError(f"clearance {clearance} is above the site's clearance {self.site_clearance}")
        self.db.execute("INSERT INTO clearances (user, label) VALUES (?, ?) "
                        "ON CONFLICT(user) DO UPDATE SET label = excluded.label", (user, str(clearance)))
        self._cache.clear()
