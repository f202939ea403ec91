"""The `cogmesh` command: run the suite and talk to it.

    cogmesh up [--demo]              start every service, supervised
    cogmesh chat "What is 2 + 2?"    run one turn and watch it stream
    cogmesh chat                     an interactive session (/help lists its commands)
    cogmesh watch SESSION --after N  follow any session from a cursor
    cogmesh sessions list | sessions label | models list | agents list
    cogmesh agents create NAME --file DEF.yaml | agents get NAME@prod   versioned agents (docs/cli.md)
    cogmesh eval cases.yaml --agent NAME   run an agent over a dataset and report (docs/eval.md)
Every command takes --json for scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import secrets
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape

from cogmesh.client import GatewayClient, GatewayError
from cogmesh.common.v1 import resources_pb2
from gateway.auth import hash_key
from services.kit.config import Settings
from services.suite import agents_cli, history_cli
from services.suite.chat import interactive, spin
from services.suite.eval import command as eval_command
from services.suite.render import EventPrinter, agent_lines, message_json, model_lines
from services.suite.settings import SuiteSettings
from services.suite.supervisor import EDGES, ORDER, StartupError, Supervisor

DEMO_MESSAGE = "What is 17 * 23?"
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _gateway(args: argparse.Namespace) -> str:
    return args.gateway or Settings().gateway_addr


def _api_key(args: argparse.Namespace) -> str:
    return str(args.api_key or os.environ.get("COGMESH_API_KEY", ""))


def _client(args: argparse.Namespace) -> GatewayClient:
    return GatewayClient(_gateway(args), api_key=_api_key(args))


async def _connect(client: GatewayClient, args: argparse.Namespace) -> None:
    await spin(
        out, f"connecting to the gateway at {client.address}…", client.wait_ready(args.connect_timeout), not args.json
    )


def _print_json(message: Any) -> None:
    print(message_json(message))


async def run_chat(
    client: GatewayClient,
    message: str,
    printer: EventPrinter,
    session_id: str,
    agent: str,
    model: str,
    scope: dict[str, str] | None = None,
) -> tuple[str, bool]:
    """Run one turn (creating a session if needed, with `scope`); returns (session_id, succeeded)."""
    if not session_id:
        session = await client.create_session(agent=agent, scope=scope)
        session_id = session.session_id
        if not printer.as_json:
            out.print(f"[dim]session {session_id} · agent {session.agent}[/dim]")
    ok = False
    stream = client.send_message(session_id, message, model=model)
    # progress until the turn's first event
    first = await spin(out, "waiting for the turn to start…", anext(stream, None), not printer.as_json)
    if first is not None:
        printer.show(first)
        ok = first.HasField("final")
    async for event in stream:
        printer.show(event)
        ok = event.HasField("final")
    return session_id, ok


async def cmd_watch(args: argparse.Namespace) -> int:
    """Follow a session from a cursor, resuming by seq if the stream breaks."""
    printer = EventPrinter(out, args.json)
    async with _client(args) as client:
        await _connect(client, args)
        if not args.json and not args.until_idle:
            err.print(f"[dim]following {escape(args.session)} after seq {args.after} · Ctrl-C stops[/dim]")
        async for event in client.subscribe(args.session, args.after, stop_when_idle=args.until_idle):
            if not args.json and event.WhichOneof("payload") == "status":
                out.print(f"[dim]turn {event.turn_id[:8]} · seq {event.seq}[/dim]")
            printer.show(event)
    return 0


async def cmd_chat(args: argparse.Namespace) -> int:
    printer = EventPrinter(out, args.json)
    async with _client(args) as client:
        await _connect(client, args)
        if args.message:
            _, ok = await run_chat(
                client, args.message, printer, args.session, args.agent, args.model, dict(args.scope)
            )
            return 0 if ok else 1
        return await interactive(
            client,
            out,
            err,
            as_json=args.json,
            agent=args.agent,
            model=args.model,
            session_id=args.session,
            scope=dict(args.scope),
        )


async def cmd_sessions_list(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        page = await client.list_sessions(
            page_size=args.page_size,
            page_token=args.page_token,
            scope_filter=dict(args.scope),
            labels=dict(args.label),
            statuses=args.status,
            agent=args.agent,
            agent_version=args.agent_version,
            created_after=args.created_after,
            created_before=args.created_before,
            active_after=args.active_after,
            active_before=args.active_before,
        )
    if args.json:
        _print_json(page)
        return 0
    for s in page.sessions:
        status = resources_pb2.SessionStatus.Name(s.status).removeprefix("SESSION_STATUS_").lower()
        labels = "".join(f"  {k}={v}" for k, v in sorted(s.labels.items()))
        agent = f"{s.agent}@{s.agent_version}" if s.agent_version else s.agent  # a stored agent's version
        out.print(
            f"{s.session_id}  agent={agent}  status={status}  messages={s.message_count}  "
            f"updated={s.update_time.ToJsonString()}{labels}",
            markup=False,
        )
    if page.next_page_token:
        more = "more" if page.sessions else "none in this stretch, more"
        out.print(f"[dim]{more}: --page-token {page.next_page_token}[/dim]")
    return 0


async def cmd_sessions_label(args: argparse.Namespace) -> int:
    changes: dict[str, str | None] = dict(args.set)
    changes.update({key: None for key in args.remove})
    if not changes and not args.replace:
        err.print("error: give --set KEY=VALUE or --remove KEY (or --replace to clear every label)", markup=False)
        return 1
    async with _client(args) as client:
        session = await client.update_labels(args.session, changes, replace=args.replace)
    if args.json:
        _print_json(session)
        return 0
    out.print(" ".join(f"{k}={v}" for k, v in sorted(session.labels.items())) or "(no labels)", markup=False)
    return 0


async def cmd_models_list(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        reply = await client.list_models(provider=args.provider)
    if args.json:
        _print_json(reply)
        return 0
    for line in model_lines(reply):
        out.print(line)
    return 0


async def cmd_agents_list(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        reply = await client.list_agents()
    if args.json:
        _print_json(reply)
        return 0
    for line in agent_lines(reply):
        out.print(line)
    return 0


async def cmd_eval(args: argparse.Namespace) -> int:
    return await eval_command.run(args, _client(args), out, err)


async def cmd_up(args: argparse.Namespace) -> int:
    if args.redis_url:  # children read it from the environment, like every other setting
        os.environ["COGMESH_REDIS_URL"] = args.redis_url
    if args.runtime_workers is not None:
        os.environ["COGMESH_RUNTIME_WORKERS"] = str(args.runtime_workers)
    if args.replicas is not None:
        if args.replicas < 1:
            err.print("error: --replicas must be at least 1", markup=False)
            return 1
        os.environ["COGMESH_REPLICAS"] = str(args.replicas)
    settings = SuiteSettings()
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="cogmesh-logs-"))

    def report(text: str) -> None:
        if args.json:
            say(lambda: print(json.dumps({"event": "supervisor", "text": text.strip()}), flush=True))
        else:
            say(lambda: out.print(text))

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP: the terminal was closed. Without a handler it would end us and leave every service running.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    try:
        supervisor = Supervisor(settings, log_dir, report, ready_timeout_s=args.ready_timeout, edges=EDGES)
    except StartupError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", markup=True)
        return 1
    try:
        report(
            f"starting cogmesh: {len(ORDER)} services and the browser edge in {len(supervisor.children)} processes, "
            f"logs in {log_dir}"
        )
        if not await _until_stopped(supervisor.start(), stop):
            return 130  # stopped while starting: start() stopped what it had started
        gateways = ",".join(supervisor.addresses["gateway"])
        first = supervisor.addresses["gateway"][0]
        console = f"http://{settings.web_addr}/console/"
        if args.json:
            ready = {"event": "ready", "gateway": gateways, "console": console, "log_dir": str(log_dir)}
            say(lambda: print(json.dumps(ready), flush=True))
        else:
            say(lambda: out.print(f"[green]ready[/green]: gateway on {gateways} · Ctrl-C stops everything"))
            say(lambda: out.print(f"web console: {console}"))
        if args.demo:
            report(f"demo turn: {DEMO_MESSAGE}")
            await _until_stopped(demo_turn(gateways, args.json), stop)
            report(f'try: cogmesh chat "What is (2 + 3) * 4?"   ·   grpcurl -plaintext {first} list')
        await stop.wait()
        report("stopping all services")
    except StartupError as exc:
        message = f"[red]error:[/red] {escape(str(exc))}"
        say(lambda: err.print(message, markup=True), sys.stderr)
        return 1
    finally:  # whatever ended us (a signal, an error, a write that failed), no service outlives us
        await supervisor.stop()
    report("stopped")
    return 0


async def _until_stopped(work: Awaitable[None], stop: asyncio.Event) -> bool:
    """Run `work` until it is done (True) or `stop` is set (False: `work` is cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return False


async def demo_turn(gateways: str, as_json: bool) -> None:
    async with GatewayClient(gateways) as client:
        try:
            await run_chat(client, DEMO_MESSAGE, EventPrinter(out, as_json), "", "default", "")
        except GatewayError as exc:
            message = f"demo turn failed: {exc}"
            say(lambda: err.print(message, markup=False), sys.stderr)
        except OSError:  # stdout lost mid-turn: the services keep running until we are stopped
            lose(sys.stdout)


def say(write: Callable[[], object], stream: TextIO | None = None) -> None:
    """Write to stdout (or `stream`), surviving its loss: a supervisor must go on to stop its
    services, not die of a failed write."""
    try:
        write()
    except OSError:
        lose(stream or sys.stdout)


def lose(stream: TextIO) -> None:
    """Point a stream that can no longer be written (the reader of `cogmesh up | tee log` killed by the
    same Ctrl-C: EPIPE; a closed terminal: EIO) at /dev/null from now on."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)
    with contextlib.suppress(OSError):
        stream.flush()  # what the failed write left in the buffer goes to /dev/null, not to exit's flush


GATEWAY_HELP = "gateway address (default: $COGMESH_GATEWAY_ADDR or 127.0.0.1:50051)"
API_KEY_HELP = "API key (default: $COGMESH_API_KEY; not needed in dev mode)"


def _count(text: str) -> int:
    """An argparse type: a whole number >= 0, named in the usage error otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _scope_entry(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _label_key(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("expected a label key")
    return text


def _label_entry(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _when(text: str) -> datetime.datetime:
    """An ISO 8601 time (UTC when it names no zone), or a span back from now: 30s, 15m, 2h, 7d."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isdigit():
        return datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=int(text[:-1]) * units[text[-1]])
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time or a span like 2h or 7d, got {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="cogmesh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # Global options go before the command or after it: `cogmesh --gateway H:P chat ...` and
    # `cogmesh chat --gateway H:P ...`. A command's own copy defaults to SUPPRESS, so that when it is not
    # given there the value given before the command stays (argparse copies a subparser's defaults over it).
    root.add_argument("--json", action="store_true", help="machine-readable output")
    root.add_argument("--gateway", default="", help=GATEWAY_HELP)
    root.add_argument("--api-key", default="", help=API_KEY_HELP)
    sub = root.add_subparsers(dest="command", required=True)

    def command(
        name: str, help_text: str, run: Callable[[argparse.Namespace], Awaitable[int]], parent: Any = sub
    ) -> Any:
        p = parent.add_parser(name, help=help_text)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
        p.set_defaults(run=run)
        return p

    def with_gateway(p: Any) -> Any:
        p.add_argument("--gateway", default=argparse.SUPPRESS, help=GATEWAY_HELP)
        p.add_argument("--api-key", default=argparse.SUPPRESS, help=API_KEY_HELP)
        p.set_defaults(takes_gateway=True)
        return p

    up = command("up", "start the whole suite as supervised processes", cmd_up)
    up.add_argument("--demo", action="store_true", help="once ready, run a demo turn that calls the calculator")
    up.add_argument("--log-dir", default="", help="folder for the services' logs (default: a new temp folder)")
    up.add_argument(
        "--redis-url",
        default="",
        help="run on Redis (sessions, leases, event log): redis://host:6379/0, "
        "redis+sentinel://host:26379/service or redis+cluster://host:7000,host:7001",
    )
    up.add_argument("--ready-timeout", type=_seconds, default=30.0, help="seconds each service gets to become SERVING")
    up.add_argument(
        "--runtime-workers",
        type=_count,
        default=None,
        help="runtime processes, each on its own port (default: $COGMESH_RUNTIME_WORKERS, else one per core, min 2)",
    )
    up.add_argument(
        "--replicas",
        type=_count,
        default=None,
        help="processes of every other service (default: $COGMESH_REPLICAS or 1; more need --redis-url)",
    )

    chat = with_gateway(command("chat", "send a message and watch the turn stream, or chat interactively", cmd_chat))
    chat.add_argument("message", nargs="?", default="", help="the message; omit it for an interactive session")
    chat.add_argument("--agent", default="default", help="agent for a new session")
    chat.add_argument("--session", default="", help="continue this session instead of creating one")
    chat.add_argument("--model", default="", help="model name overriding the agent's model")
    chat.add_argument(
        "--scope",
        type=_scope_entry,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="scope of a new session, e.g. --scope end_user=u_42 (repeat for more entries)",
    )
    chat.add_argument("--connect-timeout", type=_seconds, default=5.0, help="seconds to wait for the gateway")

    watch = with_gateway(command("watch", "follow a session's events from a cursor", cmd_watch))
    watch.add_argument("session", help="session id")
    watch.add_argument("--after", type=_count, default=0, help="start after this seq (0 replays what is retained)")
    watch.add_argument("--until-idle", action="store_true", help="stop once caught up and no turn is running")
    watch.add_argument("--connect-timeout", type=_seconds, default=5.0, help="seconds to wait for the gateway")

    sessions = sub.add_parser("sessions", help="sessions of your tenant").add_subparsers(dest="action", required=True)
    sl = with_gateway(command("list", "list sessions, newest first", cmd_sessions_list, sessions))
    sl.add_argument("--page-size", type=_count, default=50)
    sl.add_argument("--page-token", default="")
    sl.add_argument(
        "--scope", type=_scope_entry, action="append", default=[], metavar="KEY=VALUE", help="only sessions of a scope"
    )
    sl.add_argument(
        "--label", type=_label_entry, action="append", default=[], metavar="KEY=VALUE", help="only sessions with it"
    )
    sl.add_argument(
        "--status", action="append", default=[], choices=["idle", "running", "paused", "failed"], help="any of these"
    )
    sl.add_argument("--agent", default="", help="only sessions opened with this agent")
    sl.add_argument(
        "--agent-version", type=_count, default=0, metavar="N", help="only sessions on version N (of --agent)"
    )
    for name, what in (("created", "created"), ("active", "last active")):
        for side, how in (("after", "at or after"), ("before", "before")):
            sl.add_argument(
                f"--{name}-{side}",
                type=_when,
                default=None,
                metavar="WHEN",
                help=f"only sessions {what} {how} WHEN (ISO 8601, or a span back from now: 15m, 2h, 7d)",
            )
    lab = with_gateway(command("label", "set or remove a session's labels", cmd_sessions_label, sessions))
    lab.add_argument("session", help="session id")
    lab.add_argument("--set", type=_label_entry, action="append", default=[], metavar="KEY=VALUE")
    lab.add_argument("--remove", type=_label_key, action="append", default=[], metavar="KEY")
    lab.add_argument("--replace", action="store_true", help="the session's labels become exactly the --set ones")
    history_cli.register(sessions, command, with_gateway)
    agents_cli.register_sessions(sessions, command, with_gateway)

    models = sub.add_parser("models", help="the model catalogue").add_subparsers(dest="action", required=True)
    ml = with_gateway(command("list", "list models", cmd_models_list, models))
    ml.add_argument("--provider", default="", help="only this provider")

    agents = sub.add_parser("agents", help="agent definitions").add_subparsers(dest="action", required=True)
    with_gateway(command("list", "list agents", cmd_agents_list, agents))
    agents_cli.register(agents, command, with_gateway)
    eval_command.add_arguments(
        with_gateway(command("eval", "run an agent over a dataset of cases and report", cmd_eval))
    )
    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="action", required=True)
    new = command("new", "make a new API key and the line to add to the keys file", cmd_keys_new, keys)
    new.add_argument("--tenant", required=True)
    new.add_argument("--principal", required=True)
    return root


async def cmd_keys_new(args: argparse.Namespace) -> int:
    key = "cm_" + secrets.token_urlsafe(32)
    entry = {"sha256": hash_key(key), "tenant": args.tenant, "principal": args.principal}
    if args.json:
        print(json.dumps({"api_key": key, "entry": entry}))
    else:
        out.print(f"API key (shown once, store it safely): {key}")
        out.print("add to the keys file (COGMESH_API_KEYS_FILE) under `keys:`")
        out.print(f"  - {{sha256: {entry['sha256']}, tenant: {args.tenant}, principal: {args.principal}}}")
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, global options given before the command or after it."""
    cli = parser()
    args = cli.parse_args(argv)
    if (args.gateway or args.api_key) and not getattr(args, "takes_gateway", False):
        command = " ".join(part for part in (args.command, getattr(args, "action", "")) if part)
        cli.error(
            f"--gateway and --api-key do not apply to `cogmesh {command}`"
            + (" (its services' addresses come from COGMESH_<SERVICE>_ADDR)" if command == "up" else "")
        )
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    try:
        code = asyncio.run(args.run(args))
    except KeyboardInterrupt:  # Ctrl-C outside a turn: leave quietly, as shells expect
        code = 130
    except (TypeError, ValueError) as exc:  # the SDK refusing an argument, before any call
        if args.json:
            print(json.dumps({"error": {"code": "INVALID_ARGUMENT", "message": str(exc), "reason": ""}}))
        else:
            err.print(f"error: {exc}", markup=False)
        code = 1
    except GatewayError as exc:
        if args.json:
            print(json.dumps({"error": {"code": exc.code.name, "message": exc.message, "reason": exc.reason}}))
        else:
            err.print(f"error: {exc}", markup=False)
            if exc.code.name == "UNAVAILABLE":
                err.print("is the suite running? start it with: cogmesh up", markup=False)
        code = 2 if exc.code.name == "UNAVAILABLE" else 1
    raise SystemExit(code)
