"""rcm.cli: what the server command lines share."""
from __future__ import annotations

import os
import signal

import pytest

from rcm.cli import stop_on_term


def test_a_stop_request_before_the_loop_takes_over_exits_cleanly():
    before = signal.getsignal(signal.SIGTERM)
    try:
        stop_on_term()
        with pytest.raises(SystemExit) as e:
            os.kill(os.getpid(), signal.SIGTERM)
        assert e.value.code == 0
    finally:
        signal.signal(signal.SIGTERM, before)
