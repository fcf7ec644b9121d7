"""The chat server's edge: every change to the database is a step of actions (actions.write), every asyncio
task is the server's (tasks.Tasks), and ``stop`` drains them: says in flight reach the journal, no task is left.
"""
from __future__ import annotations

import ast
import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from chat_fake_rcm import FakeNetwork
from chat_missions import FAST_KDF, PASSWORD, add_users
from testkit import wait_until

import chat_server
from chat_server.client import ChatClient
from chat_server.config import parse_chat_settings
from chat_server.journal import read_journal
from chat_server.payload import ChatMessage, decode_payload
from chat_server.server import ChatServer
from chat_server.store import ChatStore
from chat_server.tasks import Tasks
from contracts.mission import parse_mission

pytestmark = pytest.mark.timeout(60)
PACKAGE = Path(chat_server.__file__).parent

# ChatStore's methods, each in one class: a new one must be put in one (a writer is called by actions.write only).
WRITERS = {"add_acknowledgement", "add_definition", "add_membership", "add_message", "add_pending", "add_receipt",
           "add_receipts", "add_session", "add_user", "delete_session", "delete_sessions_of", "expire_sessions",
           "hold", "mark_read", "put_private_room", "put_room_floor", "quarantine", "record_sent", "release",
           "remove_membership", "remove_pending", "set_state", "create_message_tables", "index_for_search"}
TRANSACTION = {"begin", "commit", "rollback"}
READERS = {"COLUMNS", "acknowledged_at", "acknowledgements_of", "all_memberships", "from_row", "get_state",
           "has_message", "has_receipt", "held", "held_count", "history", "is_pending", "known_definitions", "labels",
           "last_order", "message", "password_hash", "pending_at", "pending_before", "private_rooms", "quarantined",
           "read_marker", "receipts_of", "room_activity", "room_floors", "room_of", "sent_msg_id", "session_user",
           "since_n", "unread", "users", "chat_gone", "changes", "search_index_behind",
           "close", "open_reader", "checkpoint_elsewhere"}     # (the connection's, not the data's)


def calls(path: Path) -> list[tuple[int, str, str]]:
    """Every call ``<receiver>.<name>(...)`` in a module: (line, the receiver's last name, name)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            last = receiver.id if isinstance(receiver, ast.Name) else \
                receiver.attr if isinstance(receiver, ast.Attribute) else ""
            out.append((node.lineno, last, node.func.attr))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            out.append((node.lineno, "", node.func.id))
    return out


def test_every_method_of_the_store_is_a_reader_or_a_writer():
    public = {n for n in dir(ChatStore) if not n.startswith("_")}
    assert public == WRITERS | TRANSACTION | READERS, (
        f"classify {sorted(public - WRITERS - TRANSACTION - READERS)} in this test (a writer is called by "
        f"actions.write only); gone: {sorted((WRITERS | TRANSACTION | READERS) - public)}")


def test_only_actions_write_changes_the_database():
    """The store's writers are called by actions.write alone (and by the store itself and the offline
    ``adduser`` command); transactions are the server's step executor's."""
    allowed = {"actions.py", "store.py", "store_messages.py", "__main__.py"}
    found = [f"{path.name}:{line}: store.{name}" for path in sorted(PACKAGE.glob("*.py")) if path.name not in allowed
             for line, receiver, name in calls(path)
             if receiver == "store" and (name in WRITERS or name in TRANSACTION and path.name != "server.py")]
    assert found == []


def test_no_task_is_started_outside_tasks():
    """Every asyncio task of the server is spawned by its Tasks (the client library is not the server's; the
    journal's one fsync at a time is awaited by Journal.close)."""
    allowed = {"tasks.py", "client.py", "journal.py"}
    found = [f"{path.name}:{line}: {name}" for path in sorted(PACKAGE.glob("*.py")) if path.name not in allowed
             for line, _, name in calls(path) if name in ("ensure_future", "create_task")]
    assert found == []


# --- Tasks ---------------------------------------------------------------------------------------------
async def test_close_lets_finishing_tasks_end_then_cancels_the_rest():
    tasks = Tasks()
    gate = asyncio.Event()
    ended: list[str] = []

    async def say() -> None:
        await gate.wait()
        ended.append("say")

    async def timer() -> None:
        await asyncio.Event().wait()
    say_task = tasks.spawn(say(), finish=True)
    timer_task = tasks.spawn(timer())
    assert say_task in tasks and tasks.finishing == {say_task} and len(tasks) == 2
    closing = asyncio.ensure_future(tasks.close(grace=30.0))
    await asyncio.sleep(0)
    assert not timer_task.done()           # the others go on serving the finishing ones meanwhile
    gate.set()
    await closing
    assert ended == ["say"] and timer_task.cancelled() and len(tasks) == 0


async def test_close_ends_the_tasks_spawned_while_it_closes_and_after():
    tasks = Tasks()

    async def spawns_when_cancelled() -> None:
        try:
            await asyncio.Event().wait()
        finally:                           # a cleanup that starts something (a close handshake, say)
            tasks.spawn(asyncio.Event().wait())
    first = tasks.spawn(spawns_when_cancelled())
    await asyncio.sleep(0)
    await tasks.close()
    assert first.cancelled()
    assert not any(not t.done() for t in asyncio.all_tasks() if t is not asyncio.current_task())
    late = tasks.spawn(asyncio.Event().wait())
    await asyncio.sleep(0)                 # (its first step)
    cancelled = late.cancelled()
    late.cancel()
    assert cancelled


async def test_finishing_tasks_past_the_grace_are_cancelled():
    tasks = Tasks()
    stuck = tasks.spawn(asyncio.Event().wait(), finish=True)
    await tasks.close(grace=0.01)
    assert stuck.cancelled()


# --- the server ------------------------------------------------------------------------------------------
async def test_a_join_whose_read_marker_cannot_be_stored_leaves_no_membership(cluster_factory):
    cl = await cluster_factory(["A"], users={"A": ["alice", "carol"]})
    srv = cl.servers["A"]
    alice = await cl.client("A", "alice")
    await alice.join("ops")
    await alice.say("ops", "before carol")
    await wait_until(lambda: srv.store.last_order("ops"), "alice's message stored")
    carol = await cl.client("A", "carol")

    def full(*args: object) -> None:
        e = sqlite3.OperationalError("database or disk is full")
        e.sqlite_errorcode = sqlite3.SQLITE_FULL           # type: ignore[attr-defined]  (as SQLite's own carry it)
        raise e
    srv.store.mark_read = full                             # type: ignore[method-assign]
    await carol.send_raw(json.dumps({"type": "join", "room": "ops"}))
    await carol.wait_for(lambda f: f["type"] == "error" and f["code"] == "unavailable"
                         and "cannot write to its disk" in f["message"], 10)
    # The membership and the read marker are one step: neither is kept, in the database or in the core.
    assert ("carol", "ops") not in srv.store.all_memberships()
    assert "ops" not in srv.core.rooms.rooms_of("carol")


def irc_mission(tmp_path: Path):
    raw = {"mission": {"name": "t", "data_dir": "var"},
           "sites": {"A": {"rcm": "127.0.0.1:20000", "chat": "127.0.0.1:21000", "irc": "127.0.0.1:21500"}},
           "chat": {"kdf_n": FAST_KDF, "receipt_interval": 0.05, "presence_interval": 0.05,
                    "rcm_ack_interval": 0.05}}
    mission = parse_mission(raw, tmp_path)
    add_users(mission, "A", ["alice", "carol"])
    return mission


async def test_stop_lets_says_in_flight_reach_the_journal_and_leaves_no_task(tmp_path):
    mission = irc_mission(tmp_path)
    net = FakeNetwork(["A"])
    before = asyncio.all_tasks()
    srv = ChatServer(mission, "A", parse_chat_settings(mission.chat), rcm_connect=net.connector("A"),
                     host="127.0.0.1", port=0, irc_port=0)
    await srv.start()
    await asyncio.wait_for(srv.rcm_connected.wait(), 5)
    alice = await ChatClient.connect(f"ws://127.0.0.1:{srv.port}/ws", "alice", PASSWORD)
    await alice.join("ops")
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.irc_front.port)
    writer.write(f"PASS :{PASSWORD}\r\nNICK carol\r\nUSER carol 0 * :carol\r\nJOIN #ops\r\n".encode())
    await wait_until(lambda: "ops" in srv.core.rooms.rooms_of("carol"), "carol in #ops over IRC")

    net.gate = asyncio.Event()             # RCM answers no send until the server is stopping
    says = [asyncio.ensure_future(alice.say("ops", f"web {i}")) for i in range(5)]
    writer.write(b"".join(f"PRIVMSG #ops :irc {i}\r\n".encode() for i in range(5)))
    await wait_until(lambda: len(srv.frames.says) == 10, "ten says in flight")
    assert all(t in srv.tasks for t in srv.frames.says)

    stopping = asyncio.ensure_future(srv.stop())
    await wait_until(lambda: srv._stopping and not srv.connections, "the clients closed")
    net.gate.set()
    await stopping

    accepted = {p.text for origin, raw, _ in net.sent_payloads if isinstance(p := decode_payload(raw), ChatMessage)}
    journaled = {r["text"] for r in read_journal(srv.journal.path) if r["kind"] == "send"}
    assert accepted == journaled == {f"{kind} {i}" for kind in ("web", "irc") for i in range(5)}
    await alice.close()
    writer.close()
    await asyncio.gather(*says, return_exceptions=True)
    left = asyncio.all_tasks() - before - {asyncio.current_task()}
    assert left == set()
