"""Logging in at a site: passwords, session tokens, and the limits on guessing.

Failed password logins slow down a user at one address, an address (many
operators share one: a site's LAN, a NAT) and a user over every address (a
guess spread over many addresses, ten times wider so that one address cannot
make a user wait elsewhere: audit row 9). A session token is 256 random bits:
resuming with one is never slowed down. scrypt runs in a pool of its own, at
most ``max_verifying`` checks at once, so a burst of logins never queues in
front of the journal's fsyncs (audit row 10); a failure is counted before the
hash, so a parallel burst is limited at once. Logins read the sessions table;
a new token and a logout are store actions (actions.py) the server applies.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from . import accounts
from .accounts import LoginLimiter, dummy_hash, new_session_token, token_digest
from .actions import RevokeSessionTokens, StoreSessionToken
from .config import ChatSettings
from .protocol import ErrorCode as E
from .protocol import Refusal
from .store import ChatStore

ADDRESS_FAILURE_FACTOR = 4   # failed logins allowed per address = this x login_max_failures
USER_FAILURE_FACTOR = 10     # ... per user over every address, = this x login_max_failures
BAD_LOGIN = "unknown user, wrong password or expired session"


class Logins:
    def __init__(self, settings: ChatSettings, store: ChatStore, clock: Callable[[], float],
                 monotonic: Callable[[], float]) -> None:
        s = self.settings = settings
        self.store = store
        self.clock = clock
        self.monotonic = monotonic
        self.pair_limiter = LoginLimiter(s.login_max_failures, s.login_window, s.login_lockout)
        self.addr_limiter = LoginLimiter(ADDRESS_FAILURE_FACTOR * s.login_max_failures, s.login_window,
                                         s.login_lockout)
        self.user_limiter = LoginLimiter(USER_FAILURE_FACTOR * s.login_max_failures, s.login_window,
                                         s.login_lockout)
        self._dummy_hash = dummy_hash(s.kdf_n)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="scrypt")
        self._verifying = 0

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def with_password(self, user: str, password: str, address: str) -> tuple[str, StoreSessionToken]:
        """A new session token and the action that stores it if the password is right; Refusal (auth_failed,
        rate_limited) if not."""
        now = self.monotonic()
        keys = ((self.pair_limiter, f"{user}\0{address}"), (self.addr_limiter, address), (self.user_limiter, user))
        wait = max(limiter.retry_after(key, now) for limiter, key in keys)
        if wait > 0:
            raise Refusal(E.RATE_LIMITED, f"too many failed logins; try again in {wait:.0f} s")
        if self._verifying >= self.settings.max_verifying:
            raise Refusal(E.RATE_LIMITED, "the server is checking many logins at once; try again in a second")
        for limiter, key in keys:       # counted before the check: a parallel burst counts at once
            limiter.failed(key, now)
        self._verifying += 1
        try:
            stored = self.store.password_hash(user)
            ok = await asyncio.get_running_loop().run_in_executor(
                self._pool, accounts.verify_password, password, stored or self._dummy_hash)
        finally:
            self._verifying -= 1
        if not (ok and stored is not None):
            raise Refusal(E.AUTH_FAILED, BAD_LOGIN)
        self.pair_limiter.succeeded(keys[0][1])
        self.addr_limiter.forgive(address)     # (an address's other failures are not forgiven)
        self.user_limiter.forgive(user)
        token = new_session_token()
        return token, StoreSessionToken(token_digest(token), user, self.clock() + self.settings.session_ttl)

    def with_token(self, user: str, token: str, address: str) -> str:
        """The token's digest if it resumes a session of ``user``; Refusal (auth_failed) if not.

        A wrong token counts against the address only: a lockout here would let anyone who knows a
        user's name keep them from resuming."""
        digest = token_digest(token)
        if self.store.session_user(digest, self.clock()) != user:
            self.addr_limiter.failed(address, self.monotonic())
            raise Refusal(E.AUTH_FAILED, BAD_LOGIN)
        return digest

    def revoke(self, user: str, digest: str | None, everywhere: bool) -> list[RevokeSessionTokens]:
        """The action that ends one login (its token) or, ``everywhere``, every login of the user here."""
        if everywhere:
            return [RevokeSessionTokens(user, None)]
        return [] if digest is None else [RevokeSessionTokens(user, digest)]
