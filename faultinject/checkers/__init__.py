"""Property checkers over delivery records (simulated runs and real journals)."""
from .awareness import AwarenessBounds, check_connection_awareness, check_robustness
from .confined import Confinement, allowed_sites
from .eventual import check_eventual_delivery
from .expiry import check_expiry
from .history import (
    BLACKHOLE,
    DOWN,
    UP,
    Declared,
    History,
    LinkEvent,
    LinkTimeline,
    StablePeriod,
    Violation,
    missing_count,
)
from .journal import load_journals, read_jsonl
from .leaks import LeakWatch, check_journal_labels
from .properties import (
                         check_all,
                         check_fifo,
                         check_igo,
                         check_no_duplicates,
                         check_order_keys,
                         check_reliability,
                         stable_periods,
                         summarize,
)

__all__ = ["BLACKHOLE", "DOWN", "UP", "AwarenessBounds", "Confinement", "Declared", "History", "LeakWatch",
           "LinkEvent", "LinkTimeline", "StablePeriod", "Violation", "allowed_sites", "check_all",
           "check_connection_awareness", "check_eventual_delivery", "check_expiry", "check_fifo",
           "check_igo", "check_journal_labels", "check_no_duplicates", "check_order_keys", "check_reliability",
           "check_robustness", "load_journals", "missing_count", "read_jsonl", "stable_periods", "summarize"]
