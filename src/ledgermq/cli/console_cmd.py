"""``ledgermq console``: the web console for a cluster, on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

from pathlib import Path

import click

from ledgermq.acl.signing import Credentials
from ledgermq.cli.runtime import serve
from ledgermq.cli.tls_client_options import tls_client_options, tls_options_from_flags
from ledgermq.console.settings import DEFAULT_PORT, ConsoleSettings, ConsoleSettingsError


@click.command()
@click.option(
    "-n",
    "--namesrvAddr",
    "namesrv",
    envvar="NAMESRV_ADDR",
    default="127.0.0.1:9876",
    show_default=True,
    help="name server address(es), host:port[;host:port] (env NAMESRV_ADDR)",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to serve on (loopback unless told)")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int, help="port to serve on (0: any free one)")
@click.option(
    "--users-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="rocketmq-dashboard users.properties (name=password[,1]; 1: admin): a login is required",
)
@click.option(
    "--open-without-login", is_flag=True, help="serve a non-loopback address without a users file (anyone can change)"
)
@click.option("--access-key", envvar="LEDGERMQ_ACCESS_KEY", help="ACL access key (env LEDGERMQ_ACCESS_KEY)")
@click.option("--secret-key", envvar="LEDGERMQ_SECRET_KEY", help="ACL secret key (env LEDGERMQ_SECRET_KEY)")
@click.option(
    "--controller",
    "controller",
    help="controller mode: the controller(s), host:port[;host:port], when the console cannot find them "
    "(it looks in the brokers' controllerAddr, then asks the name servers)",
)
@click.option("--refresh-ms", default=2000, show_default=True, type=int, help="how often live page parts refresh")
@tls_client_options
def console(
    namesrv: str,
    host: str,
    port: int,
    users_file: Path | None,
    open_without_login: bool,
    access_key: str | None,
    secret_key: str | None,
    controller: str | None,
    refresh_ms: int,
    use_tls: bool,
    tls_trust_cert: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_key_password: str | None,
    tls_insecure: bool,
) -> None:
    """Serve the web console: cluster, topics, consumers, producers, messages, DLQ, trends.

    A TLS cluster is reached with the options of ``ledgermq admin`` (docs/tls.md):
    ``--tls --tls-trust-cert ca.pem [--tls-cert client.pem --tls-key client.key]``."""
    if bool(access_key) != bool(secret_key):
        raise click.UsageError("give both --access-key and --secret-key, or neither")
    tls = tls_options_from_flags(use_tls, tls_trust_cert, tls_cert, tls_key, tls_key_password, tls_insecure)
    credentials = Credentials(access_key, secret_key) if access_key and secret_key else None
    try:
        settings = ConsoleSettings(
            namesrv=namesrv,
            host=host,
            port=port,
            users_file=users_file,
            open_without_login=open_without_login,
            credentials=credentials,
            controller_addrs=controller,
            refresh_ms=refresh_ms,
            tls=tls,
        )
        from ledgermq.console.app import ConsoleServer  # aiohttp and Jinja2: loaded only for this command

        server = ConsoleServer(settings)
    except ConsoleSettingsError as exc:
        raise click.ClickException(str(exc)) from None

    async def start() -> None:
        try:
            await server.start()
        except OSError as exc:
            raise click.ClickException(f"cannot serve the console on {host}:{port} (--host/--port): {exc}") from None
        login = f"login required ({users_file})" if users_file else "no login (loopback)"
        link = "TLS" if tls is not None else "plain"
        click.echo(f"ledgermq console on {server.url} for name server {namesrv} ({link}); {login}", err=True)

    serve(start, server.stop)
