"""What every ``ledgermq admin`` command shares: the ``-n`` option, running one coroutine
against a connected ``AdminClient`` (with the credentials and TLS options the ``admin`` group
parsed), and printing rich tables as plain text.

It sits below the command modules (``ledgermq.cli.admin_cmd`` and ``ledgermq.cli.admin.*``)
so they all take it from here and none has to import another back."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
from rich.console import Console, RenderableType

from ledgermq.acl.signing import Credentials
from ledgermq.admin.client import AdminClient
from ledgermq.errors import LedgerError

T = TypeVar("T")
TLS_META = "ledgermq.admin.tls"  # the click context's meta key for the group's TlsOptions
DEFAULT_NAMESRV = "127.0.0.1:9876"

namesrv_option = click.option(
    "-n",
    "--namesrvAddr",
    "namesrv",
    envvar="NAMESRV_ADDR",
    default=DEFAULT_NAMESRV,
    show_default=True,
    help="name server address(es), host:port[;host:port] (env NAMESRV_ADDR)",
)


def print_text(*renderables: RenderableType) -> None:
    """Render to text (no markup, so "[key]" stays as typed) without trailing blanks.

    Terminal width on a terminal; unbounded otherwise, so piped tables never wrap."""
    console = Console(
        width=None if sys.stdout.isatty() else 4096, highlight=False, markup=False, emoji=False, soft_wrap=False
    )
    with console.capture() as captured:
        for renderable in renderables:
            console.print(renderable)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def run_with_client(namesrv: str, fn: Callable[[AdminClient], Awaitable[T]]) -> T:
    """Run ``fn`` on a fresh event loop with a client of ``namesrv``; a LedgerError becomes a
    one-line ClickException (exit 1) instead of a traceback."""
    ctx = click.get_current_context(silent=True)
    credentials = ctx.find_object(Credentials) if ctx is not None else None
    tls = ctx.meta.get(TLS_META) if ctx is not None else None

    async def main() -> T:
        async with AdminClient(namesrv, credentials=credentials, tls=tls) as client:
            return await fn(client)

    try:
        return asyncio.run(main())
    except LedgerError as exc:
        raise click.ClickException(str(exc)) from None


def run_repeating(namesrv: str, once: Callable[[AdminClient], Awaitable[None]], interval: int | None) -> None:
    """Print once, or every ``interval`` seconds until Ctrl-C (mqadmin's -i)."""

    async def run(client: AdminClient) -> None:
        await once(client)
        while interval is not None:
            await asyncio.sleep(interval)
            await once(client)

    try:
        run_with_client(namesrv, run)
    except KeyboardInterrupt:
        pass
