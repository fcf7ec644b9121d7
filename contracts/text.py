"""Text every format of the suite can hold.

JSON's ``\\ud800`` escape decodes to a lone surrogate, a code point UTF-8 cannot
encode: the chat protocol, the journal, SQLite, msgpack and every copy of the
order key's sortable form encode text as UTF-8, so such text is refused where
it comes in (``chat_server.protocol``, ``ordering.keys.key_problem``).
"""
from __future__ import annotations


def lone_surrogate(text: str) -> bool:
    """Does ``text`` hold a code point UTF-8 cannot encode (a lone surrogate)?"""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
