"""``python -m faultinject.proxy``: --help, bad arguments, and a full run stopped by SIGTERM."""
from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from faultinject.missions import free_ports

REPO = Path(__file__).resolve().parents[2]
CMD = [sys.executable, "-m", "faultinject.proxy"]


def free_port() -> int:
    return free_ports(1)[0]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CMD, *args], cwd=REPO, capture_output=True, text=True, timeout=30)


def test_help() -> None:
    r = run("--help")
    assert r.returncode == 0
    for option in ("--mission", "--control", "--periodic", "--seed", "--time-scale"):
        assert option in r.stdout


def test_bad_argument_is_one_line() -> None:
    r = run("--mission", "m.toml", "--control", "nowhere")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "python -m faultinject.proxy: error: argument --control: 'nowhere' must be HOST:PORT "
        "(port 0-65535, 0 picks one)"]


def two_site_mission(tmp_path: Path, *, b_rcm_port: int, dial_port: int,
                     b_dials_a: int | None = None) -> Path:
    """A mission where A dials B's RCM at ``dial_port`` (the proxy's listening side).

    With ``b_dials_a``, B also dials A there.
    """
    path = tmp_path / "m.toml"
    b_dial = "" if b_dials_a is None else f'[sites.B.dial]\nA = "127.0.0.1:{b_dials_a}"\n'
    path.write_text(f"""
[mission]
name = "cli"
[sites.A]
rcm = "127.0.0.1:{free_port()}"
chat = "127.0.0.1:{free_port()}"
[sites.A.dial]
B = "127.0.0.1:{dial_port}"
[sites.B]
rcm = "127.0.0.1:{b_rcm_port}"
chat = "127.0.0.1:{free_port()}"
{b_dial}""", encoding="utf-8")
    return path


def test_missing_mission_is_one_line(tmp_path: Path) -> None:
    r = run("--mission", str(tmp_path / "absent.toml"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "absent.toml" in lines[0] and "not found" in lines[0]


def test_flap_without_duration_is_refused(tmp_path: Path) -> None:
    path = two_site_mission(tmp_path, b_rcm_port=free_port(), dial_port=free_port())
    r = run("--mission", str(path), "--flap", "30:10")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["python -m faultinject.proxy: error: --flap needs --duration"]


async def test_runs_a_mission_until_sigterm(tmp_path: Path) -> None:
    received: asyncio.Queue[bytes] = asyncio.Queue()
    writers: list[asyncio.StreamWriter] = []

    async def site_b(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        received.put_nowait(await reader.readexactly(5))

    server_b = await asyncio.start_server(lambda r, w: asyncio.ensure_future(site_b(r, w)), "127.0.0.1", 0)
    b_port = server_b.sockets[0].getsockname()[1]
    dial_port = free_port()
    path = two_site_mission(tmp_path, b_rcm_port=b_port, dial_port=dial_port)
    proc = await asyncio.create_subprocess_exec(
        *CMD, "--mission", str(path), "--control", "127.0.0.1:0", cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    client: asyncio.StreamWriter | None = None
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines: list[str] = []
        while not lines or lines[-1] != "ready":
            line = await asyncio.wait_for(proc.stdout.readline(), 20)
            assert line, f"proxy exited early: {lines} {(await proc.stderr.read()).decode()}"
            lines.append(line.decode().strip())
        assert f"link A->B: 127.0.0.1:{dial_port} -> 127.0.0.1:{b_port}" in lines
        assert any("B-A" in l or "A-B" in l for l in lines if l.startswith("warning"))  # one-way only
        url = next(l.split(" ", 1)[1] for l in lines if l.startswith("control: "))

        _, client = await asyncio.open_connection("127.0.0.1", dial_port)
        client.write(b"hello")
        assert await asyncio.wait_for(received.get(), 5) == b"hello"

        async with aiohttp.ClientSession(url) as http:
            async with http.post("/links/A/B", json={"mode": "reset"}) as r:
                assert r.status == 200
            async with http.get("/links") as r:
                body = await r.json()
        assert body["links"][0]["mode"] == "reset"
        assert body["links"][0]["proxies"][0]["stats"]["forward"]["bytes_out"] == 5

        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 0, err.decode()
        assert out.decode().strip().splitlines()[-1] == "stopped"
        try:
            _, late = await asyncio.open_connection("127.0.0.1", dial_port)
        except OSError:
            pass  # refused: the listener is gone
        else:
            late.close()
            await late.wait_closed()
            raise AssertionError("the proxy still listens after SIGTERM")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if client is not None:
            client.close()
            with contextlib.suppress(ConnectionError, OSError):
                await client.wait_closed()
        server_b.close()
        for w in writers:
            w.close()
            with contextlib.suppress(ConnectionError, OSError):
                await w.wait_closed()
        await server_b.wait_closed()


async def test_periodic_schedule_from_the_command_line(tmp_path: Path) -> None:
    path = two_site_mission(tmp_path, b_rcm_port=free_port(), dial_port=free_port(), b_dials_a=free_port())
    proc = await asyncio.create_subprocess_exec(
        *CMD, "--mission", str(path), "--control", "127.0.0.1:0", "--periodic", "2:2",
        "--groups", "A|B", "--duration", "8", "--time-scale", "0.05", "--down-mode", "blackhole",
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1] != "ready":
            line = await asyncio.wait_for(proc.stdout.readline(), 20)
            assert line, f"proxy exited early: {lines}"
            lines.append(line.decode().strip())
        assert not any(l.startswith("warning") for l in lines)
        url = next(l.split(" ", 1)[1] for l in lines if l.startswith("control: "))
        async with aiohttp.ClientSession(url) as http:
            modes: list[str] = []
            for _ in range(100):  # the 8 s schedule takes 0.4 s at scale 0.05
                async with http.get("/history") as r:
                    modes = [e["value"] for e in (await r.json())["links"] if e["kind"] == "mode"]
                if len(modes) >= 4:
                    break
                await asyncio.sleep(0.05)
        assert modes == ["blackhole", "up", "blackhole", "up"]
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 0, err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
