"""``python -m deploy``: run missions, on this machine or host by host.

    python -m deploy up     --mission FILE [--site NAME ...]     supervise sites' RCM + chat servers
    python -m deploy demo   [--duration S]                       the four-site paper demo (make demo)
    python -m deploy certs  --mission FILE [--force | --rotate]  mission CA + per-site certificates
    python -m deploy user-cert --mission FILE --out DIR USER     a user's client certificate (TAK clients)
    python -m deploy netns  --mission FILE                       each site in its own network namespace
    python -m deploy status --mission FILE                       every site's /health, one line each
    python -m deploy lab    [--sites A,B,C ...]                  a ready lab to try by hand (make lab)
    python -m deploy lab    cut|fade|heal|slow|partition|kill|restart|status|stop ...   steer a running lab

Bad arguments or configuration: one line on stderr, exit 2. Ctrl-C/SIGTERM:
everything started is stopped (chat servers, then RCM servers), exit 0.
"""
from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from contracts.mission import Mission, MissionError, load_mission
from rcm.cli import OneLineParser, die

EXAMPLES = Path(__file__).resolve().parent / "examples"
REPO = Path(__file__).resolve().parents[1]
PROG = "python -m deploy"


def _positive(text: str) -> float:
    import argparse
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return v


def _up_down(text: str) -> tuple[float, float]:
    import argparse
    up, sep, down = text.partition(":")
    try:
        u, d = float(up), float(down)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} must be UP:DOWN seconds, e.g. 30:10") from None
    if not sep or u <= 0 or d <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be UP:DOWN seconds, both > 0")
    return u, d


def parser() -> OneLineParser:
    ap = OneLineParser(prog=PROG, description="Run RCM suite missions: supervise sites, make certificates, "
                       "run the demo, or give each site its own network namespace.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="start and supervise the RCM and chat server of every (chosen) site",
                        description="Start the RCM server and chat server of every site of the mission (or "
                        "only --site ones: one host of a multi-host mission), restart them with back-off "
                        "when they crash, show merged site-coloured logs and health; Ctrl-C stops all.")
    up.add_argument("--mission", required=True, metavar="FILE", help="mission file (TOML)")
    up.add_argument("--site", action="append", metavar="NAME", help="run only this site (repeatable)")
    up.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                    help="the servers' log level (default info)")
    up.add_argument("--status-interval", type=_positive, default=5.0, metavar="S",
                    help="seconds between health polls (default 5)")
    up.add_argument("--no-logs", action="store_true", help="do not copy server logs to the console "
                    "(they are always in <data_dir>/<site>/logs/)")

    demo = sub.add_parser("demo", help="the four-site paper demo: proxies with outages, scripted operators, "
                          "Spark archive", description="Run the paper's four-site testbed on this machine "
                          "with link outages (30 s up, 10 s down) and scripted operators, then archive it.")
    demo.add_argument("--duration", type=_positive, default=180.0, metavar="S",
                      help="seconds of chatting (default 180)")
    demo.add_argument("--dir", default=str(REPO / "var" / "demo"), metavar="DIR",
                      help="where runs go (default var/demo; each run in DIR/run-<time>/)")
    demo.add_argument("--outage", type=_up_down, default=(30.0, 10.0), metavar="UP:DOWN",
                      help="outage schedule of the flapping links (default 30:10, the paper's)")
    demo.add_argument("--interval", type=_positive, default=6.0, metavar="S",
                      help="mean seconds between one operator's messages (default 6)")
    demo.add_argument("--no-archive", action="store_true", help="skip the Spark archive at the end")
    demo.add_argument("--seed", type=int, default=1)

    certs = sub.add_parser("certs", help="create a mission CA and per-site certificates (tls = true)",
                           description="Create the mission CA in <data_dir>/ca/ and each site's certificate "
                           "and key in <data_dir>/<site>/tls/.")
    certs.add_argument("--mission", required=True, metavar="FILE", help="mission file (TOML)")
    certs.add_argument("--site", action="append", metavar="NAME", help="only this site (repeatable)")
    g = certs.add_mutually_exclusive_group()
    g.add_argument("--force", action="store_true", help="replace an existing CA (and every site's certificate)")
    g.add_argument("--rotate", action="store_true", help="new site keys and certificates from the existing CA")

    uc = sub.add_parser("user-cert", help="a user's client certificate from the mission CA (TAK clients)",
                        description="Write USER.pem, USER-key.pem, USER.p12 (with the CA, for ATAK/WinTAK/iTAK) "
                        "and truststore.p12 (the mission CA) under DIR; the CN is the account, OU = user "
                        "(docs/tak.md).")
    uc.add_argument("--mission", required=True, metavar="FILE", help="mission file (TOML)")
    uc.add_argument("--out", required=True, metavar="DIR", type=Path, help="where to write the files")
    uc.add_argument("--p12-password", default="atakatak", help="the PKCS#12 files' password (default atakatak, "
                    "as TAK tools use)")
    uc.add_argument("--days", type=int, default=365, help="validity (default 365)")
    uc.add_argument("user", help="the account name (it must exist at the site: python -m chat_server adduser)")

    ns = sub.add_parser("netns", help="run every site in its own network namespace (root, iproute2)",
                        description="Put each site in its own Linux network namespace joined by veth links "
                        "to a bridge, write a derived mission file with the namespaces' addresses, and "
                        "supervise the servers as `up` does. Namespaces are removed on exit.")
    ns.add_argument("--mission", required=True, metavar="FILE", help="mission file (TOML)")
    ns.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    ns.add_argument("--status-interval", type=_positive, default=5.0, metavar="S")
    ns.add_argument("--no-logs", action="store_true")
    ns.add_argument("--outage", type=_up_down, metavar="UP:DOWN",
                    help="take --outage-site's network link down DOWN s after every UP s")
    ns.add_argument("--outage-site", action="append", metavar="NAME",
                    help="site whose link goes down (repeatable; default: the last site)")

    st = sub.add_parser("status", help="every site's health, from its chat server's /health",
                        description="Ask each site's chat server for /health and print one line per site. "
                        "Exit 0 when every site is healthy and sees every peer connected, 1 otherwise.")
    st.add_argument("--mission", required=True, metavar="FILE", help="mission file (TOML)")
    st.add_argument("--site", action="append", metavar="NAME")
    lab_parser(sub)
    return ap


def _names(text: str) -> list[str]:
    import argparse
    names = [x.strip() for x in text.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} must be distinct names separated by commas")
    return names


def lab_parser(sub) -> None:   # type: ignore[no-untyped-def]
    """``lab``: start a lab (no ACTION), or steer the running one."""
    import argparse

    from .lab import BASE_PORT, DEFAULT_DIR, SITES, TIMEOUTS, USERS
    lab = sub.add_parser("lab", help="a ready lab: sites, link proxies, accounts; then cut, fade, heal links, "
                         "kill and restart sites", description="Without ACTION: start a lab (the paper's four "
                         "sites by default, every link through a proxy you control, web, IRC and TUI endpoints, "
                         "accounts) and print how to join and how to break it; Ctrl-C stops it. With ACTION: "
                         "steer the lab running from --dir. See docs/operations.md, 'The lab'.")
    lab.add_argument("--dir", default=str(DEFAULT_DIR), metavar="DIR", help="the lab's directory (default var/lab)")
    lab.add_argument("--sites", type=_names, default=SITES, metavar="A,B,...",
                     help=f"site names, 2 to 10 (default {','.join(SITES)})")
    lab.add_argument("--users", type=_names, default=USERS, metavar="U,V,...",
                     help=f"accounts created at every site (default {','.join(USERS)})")
    lab.add_argument("--timeouts", choices=[*TIMEOUTS, "hf"], default="lab",
                     help="RCM timeouts: lab (suspect 20 s, default), paper (60 s), fast (5 s, for tests), hf "
                          "(deploy/examples/hf-4site.toml's: suspect 120 s, sites paced, every link 2,400 bit/s "
                          "and 300 ms)")
    lab.add_argument("--base-port", type=int, default=BASE_PORT, metavar="N",
                     help=f"first port of the lab's block (default {BASE_PORT}; shifted by 1000 while busy)")
    lab.add_argument("--fresh", action="store_true", help="remove the previous lab's data (history, journals) first")
    lab.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    acts = lab.add_subparsers(dest="action", metavar="ACTION")
    d = argparse.ArgumentParser(add_help=False)
    d.add_argument("--dir", default=argparse.SUPPRESS, metavar="DIR", help="the lab's directory (default var/lab)")
    for name, what in (("cut", "reset the link A-B: connections drop, new ones are refused"),
                       ("fade", "blackhole the link A-B: connections stay open, nothing crosses (a radio fade)"),
                       ("heal", "bring A-B (without sites: every link) back up, with no delay or rate limit")):
        a = acts.add_parser(name, parents=[d], help=what, description=what[0].upper() + what[1:] + ".")
        a.add_argument("a", metavar="A", nargs="?" if name == "heal" else None)
        a.add_argument("b", metavar="B", nargs="?" if name == "heal" else None)
    slow = acts.add_parser("slow", parents=[d], help="delay and rate-limit the link A-B (both ways)",
                           description="Shape both directions of the link A-B (until `heal`).")
    slow.add_argument("a", metavar="A")
    slow.add_argument("b", metavar="B")
    slow.add_argument("--delay", type=float, metavar="S", help="one-way delay, seconds")
    slow.add_argument("--jitter", type=float, metavar="S", help="extra delay up to S seconds per chunk")
    slow.add_argument("--bandwidth", type=_positive, metavar="BPS", help="bits per second, e.g. 9600")
    part = acts.add_parser("partition", parents=[d], help="split the sites into groups (links between cut)",
                           description="Cut every link between groups and bring up every link within one. "
                           "Each GROUP is sites separated by commas; sites not named form one more group.")
    part.add_argument("groups", metavar="GROUP", nargs="+", type=_names)
    for name, what in (("kill", "kill -9 a site's servers and keep them down until `restart`"),
                       ("restart", "start a site's servers again (running ones are stopped gracefully first)")):
        a = acts.add_parser(name, parents=[d], help=what, description=what[0].upper() + what[1:] + ".")
        a.add_argument("site", metavar="SITE")
        a.add_argument("--role", choices=["rcm", "chat"], help="only this server (default both)")
    acts.add_parser("status", parents=[d], help="links, processes, and every site's health (with via)",
                    description="The running lab's links and processes, then `deploy status` of its mission. "
                    "Exit 0 when every site is healthy and sees every peer connected, 1 otherwise.")
    acts.add_parser("stop", parents=[d], help="stop the running lab (as Ctrl-C in its terminal)",
                    description="Send the running lab SIGTERM and wait until it has stopped everything.")


def _mission(ap: OneLineParser, path: str, sites: list[str] | None) -> Mission:
    try:
        m = load_mission(path)
        for s in sites or []:
            m.site(s)
    except MissionError as e:
        die(ap.prog, str(e))
    return m


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    from rich.console import Console
    console = Console(highlight=False)

    if args.command == "up":
        from .up import preflight, run_up
        m = _mission(ap, args.mission, args.site)
        sites = args.site or list(m.sites)
        problem = preflight(m, sites, args.mission)
        if problem:
            die(ap.prog, problem, 1 if problem.startswith("address already in use") else 2)
        return asyncio.run(run_up(Path(args.mission), sites, console, log_level=args.log_level,
                                  status_interval=args.status_interval, show_logs=not args.no_logs))

    if args.command == "demo":
        from .demo import run_demo
        return asyncio.run(run_demo(Path(args.dir), args.duration, console, up=args.outage[0],
                                    down=args.outage[1], seed=args.seed, archive=not args.no_archive,
                                    mean_interval=args.interval))

    if args.command == "certs":
        from .certs import CertError, create, describe
        m = _mission(ap, args.mission, args.site)
        try:
            written = create(m, args.site, force=args.force, rotate=args.rotate)
        except CertError as e:
            die(ap.prog, str(e))
        for p in written:
            extra = f"  {describe(p)}" if p.name == "cert.pem" or p == written[0] and not args.rotate else ""
            console.print(f"wrote {p} ({oct(p.stat().st_mode & 0o777)}){extra}", soft_wrap=True, markup=False)
        if not m.rcm.tls:
            console.print("note: the mission has tls = false; set tls = true in [rcm] to use these", markup=False)
        return 0

    if args.command == "user-cert":
        from .certs import CertError
        from .user_certs import write_user_cert
        m = _mission(ap, args.mission, None)
        try:
            for p in write_user_cert(m, args.user, args.out, args.p12_password, args.days):
                console.print(f"wrote {p} ({oct(p.stat().st_mode & 0o777)})", soft_wrap=True, markup=False)
        except (CertError, OSError) as e:
            die(ap.prog, str(e))
        return 0

    if args.command == "netns":
        return _netns(ap, args, console)

    if args.command == "status":
        m = _mission(ap, args.mission, args.site)
        return asyncio.run(show_status(m, args.site or list(m.sites), console))

    if args.command == "lab":
        return _lab(ap, args, console)
    return 2


def _netns(ap: OneLineParser, args, console) -> int:   # type: ignore[no-untyped-def]
    from .netns import (
        NetnsUnavailable,
        Topology,
        derived_mission,
        netns_unavailable_reason,
        pick_subnet,
        run_outages,
        used_networks,
    )
    from .up import preflight, run_up
    m = _mission(ap, args.mission, args.outage_site)
    problem = preflight(m, list(m.sites), args.mission, check_ports=False)
    if problem:
        die(ap.prog, problem)
    reason = netns_unavailable_reason()
    if reason:
        die(ap.prog, f"netns mode unavailable: {reason}", 1)
    import signal

    def terminated(signum: int, frame: object) -> None:
        raise KeyboardInterrupt      # SIGTERM during set-up: unwind through the clean-up below
    signal.signal(signal.SIGTERM, terminated)
    run_id = str(os.getpid() % 100000)
    topo = Topology(run_id, list(m.sites), pick_subnet(f"{m.name}/{run_id}", used_networks()))
    try:
        topo.up()
    except NetnsUnavailable as e:
        die(ap.prog, f"cannot create the namespaces: {e}", 1)
    try:
        derived = derived_mission(m, topo)
        console.print(f"[bold]deploy netns[/]: derived mission {derived}", soft_wrap=True)
        for line in topo.describe():
            console.print(f"  {line}", soft_wrap=True, markup=False)
        outage_sites = args.outage_site or [list(m.sites)[-1]]

        async def go() -> int:
            stop = asyncio.Event()
            outages = None
            if args.outage:
                outages = asyncio.create_task(run_outages(
                    topo, outage_sites, args.outage[0], args.outage[1], stop,
                    lambda text: console.print(f"[bold]{text}[/]")))
            try:
                return await run_up(derived, None, console, log_level=args.log_level,
                                    status_interval=args.status_interval, show_logs=not args.no_logs,
                                    wrap=topo.wrap)
            finally:
                stop.set()
                if outages is not None:
                    await asyncio.gather(outages, return_exceptions=True)
        return asyncio.run(go())
    finally:
        topo.down()
        console.print("namespaces removed")


async def show_status(m: Mission, sites: list[str], console) -> int:   # type: ignore[no-untyped-def]
    """One line per site from its /health; 0 when every site is healthy and sees every peer connected."""
    import aiohttp
    from rich.markup import escape

    from chat_server.launcher import chat_health, peers_connected

    from .supervisor import health_line
    ok = True
    async with aiohttp.ClientSession() as http:
        results = dict(zip(sites, await asyncio.gather(*(chat_health(http, m, s, timeout=3) for s in sites))))
    for site in sites:
        h = results[site]
        healthy = h.get("status") == "ok" and peers_connected(h, m.peers_of(site))
        ok &= healthy
        if h.get("status") == "down":
            text = f"chat server at {m.site(site).chat} not answering ({h.get('error')})"
        else:
            text = health_line(site, h)
        mark = "[green]ok  [/]" if healthy else "[red]BAD [/]"
        console.print(f"{mark} {escape(site)}: {escape(text)}", soft_wrap=True)
    return 0 if ok else 1


def _lab(ap: OneLineParser, args, console) -> int:   # type: ignore[no-untyped-def]
    from .lab_control import LabCommandError, lab_request
    root = Path(args.dir).resolve()
    if args.action is None:
        from .lab import run_lab
        return asyncio.run(run_lab(root, console, sites=args.sites, users=args.users, timeouts=args.timeouts,
                                   fresh=args.fresh, base_port=args.base_port, log_level=args.log_level))
    try:
        if args.action == "status":
            return _lab_status(root, console)
        if args.action == "stop":
            return _lab_stop(root, console)
        answer: dict[str, object]
        if args.action in ("cut", "fade", "heal"):
            if (args.a is None) != (args.b is None):
                die(ap.prog, "heal takes two sites (one link) or none (every link)")
            body: dict[str, object] = {"action": args.action}
            if args.a is not None:
                body["sites"] = [args.a, args.b]
            answer = lab_request(root, "/lab/link", body)
        elif args.action == "slow":
            shape = {k: v for k, v in (("delay", args.delay), ("jitter", args.jitter),
                                       ("bandwidth_bps", args.bandwidth)) if v is not None}
            if not shape:
                die(ap.prog, "slow needs --delay, --jitter or --bandwidth")
            answer = lab_request(root, "/lab/slow", {"sites": [args.a, args.b], **shape})
        elif args.action == "partition":
            answer = lab_request(root, "/lab/partition", {"groups": args.groups})
        else:
            answer = lab_request(root, "/lab/site", {"action": args.action, "site": args.site,
                                                     "roles": [args.role] if args.role else None})
    except LabCommandError as e:
        die(ap.prog, str(e), 1)
    console.print(str(answer.get("said", answer)), soft_wrap=True, markup=False)
    return 0


def _lab_status(root: Path, console) -> int:   # type: ignore[no-untyped-def]
    from rich.markup import escape

    from .lab_control import lab_request
    lab = lab_request(root, "/lab")
    console.print(f"[bold]lab[/] {escape(lab['mission'])}", soft_wrap=True)
    for link in lab["links"]:
        shapes = {p["name"]: p["shape"]["forward"] for p in link["proxies"]}
        slow = [f"{n.replace('->', ' to ')}: {sh['delay']:g} s + {sh['jitter']:g} s jitter, "
                + (f"{sh['bandwidth_bps']:g} bit/s" if sh["bandwidth_bps"] else "no rate limit")
                for n, sh in shapes.items() if sh["delay"] or sh["jitter"] or sh["bandwidth_bps"]]
        mode = link["mode"]
        style = "green" if mode == "up" else "red"
        console.print(f"  link {escape(link['pair'])}: [{style}]{mode}[/]"
                      + (f" ({escape('; '.join(slow))})" if slow else ""), soft_wrap=True)
    for site, procs in lab["processes"].items():
        cells = "; ".join(f"{r} {p['state']}" + (f", pid {p['pid']}" if p["pid"] else "")
                          + (f", restarted {p['restarts']}x" if p["restarts"] else "") for r, p in procs.items())
        console.print(f"  site {escape(site)}: {escape(cells)}", soft_wrap=True)
    m = load_mission(lab["mission"])
    return asyncio.run(show_status(m, lab["sites"], console))


def _lab_stop(root: Path, console) -> int:   # type: ignore[no-untyped-def]
    import signal
    import time

    from .lab_control import LabCommandError, lab_state, running_lab
    pid = int(lab_state(root)["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 90
    while running_lab(root) is not None or _alive(pid):
        if time.monotonic() > deadline:
            raise LabCommandError(f"the lab (pid {pid}) has not stopped after 90 s")
        time.sleep(0.1)
    console.print(f"lab stopped (pid {pid})", markup=False)
    return 0


def _alive(pid: int) -> bool:
    """Is ``pid`` running (not gone, not a zombie waiting for its parent)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


if __name__ == "__main__":
    sys.exit(main())
