"""`guestdata-sandbox serve`: the simulator on loopback; the first stdout line is its root URL."""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys
from collections.abc import Sequence

from guestdata_sandbox import selfbench
from guestdata_sandbox.dataset import SIZES
from guestdata_sandbox.ratelimit import RateLimiter
from guestdata_sandbox.server import BASE_PATH, make_server
from guestdata_sandbox.store import Store


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="guestdata-sandbox", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the API and the /_sandbox/ control surface")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8787, help="0 picks a free port")
    serve.add_argument("--seed", type=int, default=42)
    serve.add_argument("--size", choices=sorted(SIZES), default="small")
    serve.add_argument(
        "--anchor",
        type=dt.date.fromisoformat,
        default=None,
        help="the data's today, a London date (default: today in London, or --as-of's day)",
    )
    serve.add_argument(
        "--as-of",
        type=instant,
        default=None,
        metavar="INSTANT",
        help="serve the data as of this ISO 8601 instant with offset: generated as if the server "
        "started then, and read at it (rewards expired, stats' today) however long it runs; "
        "mutations still stamp the real clock (default: the real clock)",
    )
    serve.add_argument(
        "--time-scale", type=float, default=1.0, help="the rate-limit minute lasts 60*F seconds"
    )
    serve.add_argument("--no-limits", action="store_true", help="switch rate limiting off")
    serve.add_argument(
        "--colliding-account",
        action="store_true",
        help="serve account 1006 too (key gd_owner_colliding): its own data under 1001's ids",
    )
    bench = commands.add_parser("selfbench", help="measure generation and pages per second")
    bench.add_argument("--size", choices=sorted(SIZES), default="small")
    bench.add_argument("--seconds", type=float, default=5.0)
    bench.add_argument("--threads", type=int, default=2)
    return root


def instant(text: str) -> float:
    """An ISO 8601 instant with its UTC offset, as epoch seconds."""
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 instant") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset")
    return moment.timestamp()


def serve(args: argparse.Namespace) -> None:
    store = Store(args.seed, args.size, args.anchor, args.colliding_account, as_of=args.as_of)
    limiter = RateLimiter(enabled=not args.no_limits, time_scale=args.time_scale)
    server = make_server(args.host, args.port, store, limiter)
    host, port = server.server_address[:2]
    print(f"http://{host}:{port}", flush=True)
    print(
        f"guestdata-sandbox: size={args.size} seed={args.seed} anchor={store.anchor} "
        f"as_of={store.as_of_text() or 'now'} "
        f"generated in {store.dataset.generation_seconds:.2f}s; API at http://{host}:{port}{BASE_PATH}",
        file=sys.stderr,
        flush=True,
    )

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command == "serve":
        serve(args)
    else:
        selfbench.run(args.size, args.seconds, args.threads)


if __name__ == "__main__":
    main()
