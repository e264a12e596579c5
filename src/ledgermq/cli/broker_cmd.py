"""``ledgermq broker -c broker.conf``: run a broker from a RocketMQ .properties file."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from ledgermq.broker.app import BrokerApp
from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.controller_mode.config import ControllerModeConfig, check_roles_in_file
from ledgermq.broker.dledger import check_settings
from ledgermq.cli.runtime import read_properties, serve
from ledgermq.cli.tls_setup import SERVER_TLS_KEYS, install_process_tls
from ledgermq.config import StoreConfig, config_from_properties, known_keys
from ledgermq.config_keys import check_unimplemented_keys
from ledgermq.errors import ConfigError
from ledgermq.ha.config import FALLBEHIND_ALIAS, HAConfig
from ledgermq.store.open_files import raise_open_file_limit

log = logging.getLogger(__name__)


def load_broker_configs(props: dict[str, str], **overrides: object) -> tuple[BrokerConfig, StoreConfig]:
    """Broker and store configs from one properties dict.

    Bad values raise; keys no config reads are refused or warned about (config_keys.py).
    """
    broker_over = {k: v for k, v in overrides.items() if k in BrokerConfig.__dataclass_fields__}
    store_over = {k: v for k, v in overrides.items() if k in StoreConfig.__dataclass_fields__}
    broker = config_from_properties(BrokerConfig, props, **broker_over)
    store = config_from_properties(StoreConfig, props, **store_over)
    controller = config_from_properties(ControllerModeConfig, props)
    if controller.enable:  # the controller decides role and id (controller_mode/config.py)
        for warning in check_roles_in_file(props, controller):
            log.warning("%s", warning)
    elif store.enable_dleger_commit_log:
        check_settings(store)  # brokerId and brokerRole follow the Raft role in DLedger mode
    elif store.is_slave and broker.is_master:
        raise ConfigError("brokerRole=SLAVE needs brokerId > 0 (brokerId 0 is the master)")
    elif not store.is_slave and not broker.is_master:
        raise ConfigError(f"brokerRole={store.broker_role.value} needs brokerId=0 (a slave uses brokerRole=SLAVE)")
    known = known_keys(BrokerConfig) | known_keys(StoreConfig) | known_keys(HAConfig) | {FALLBEHIND_ALIAS}
    known |= known_keys(ControllerModeConfig)
    known |= SERVER_TLS_KEYS
    check_unimplemented_keys(props, known)
    return broker, store


@click.command()
@click.option("-c", "--conf", type=click.Path(path_type=Path, dir_okay=False, exists=True), help="broker .properties")
@click.option("-n", "--namesrv", default=None, help="name servers, 'host:port;host:port' (overrides namesrvAddr)")
def broker(conf: Path | None, namesrv: str | None) -> None:
    """Run a broker (RocketMQ 4.x protocol and store format)."""
    props = read_properties(conf)
    if namesrv is not None:
        props["namesrvAddr"] = namesrv
    try:
        broker_cfg, store_cfg = load_broker_configs(props)
    except ConfigError as exc:
        raise click.ClickException(f"{conf}: {exc}") from exc
    try:
        ha_cfg = HAConfig.from_properties(props)
        install_process_tls(props, conf)
    except ConfigError as exc:
        raise click.ClickException(f"{conf}: {exc}") from exc
    controller_cfg = config_from_properties(ControllerModeConfig, props)  # checked by load_broker_configs
    limit = raise_open_file_limit()
    app = BrokerApp(broker_cfg, store_cfg, ha_config=ha_cfg, controller_mode=controller_cfg)
    budget = app.broker.store.open_file_budget
    raised = f", raised from {limit.raised_from}" if limit.raised_from is not None else ""
    log.info(
        "open-file limit %d (hard %d%s): consume-queue files share at most %d open descriptors",
        limit.soft,
        limit.hard,
        raised,
        budget,
    )
    if budget < store_cfg.max_open_consume_queue_files:
        log.warning(
            "the open-file limit %d allows only %d open consume-queue files (maxOpenConsumeQueueFiles=%d); "
            "a busy broker will reopen them often",
            limit.soft,
            budget,
            store_cfg.max_open_consume_queue_files,
        )

    async def start() -> None:
        await app.start()
        click.echo(
            f"ledgermq broker {broker_cfg.broker_name}/{broker_cfg.broker_id} listening on "
            f"{broker_cfg.listen_host}:{app.port} (listenHost), registered as {broker_cfg.broker_addr}, "
            f"store {store_cfg.root_dir}, name servers {broker_cfg.namesrv_addr or '-'}",
            err=True,
        )

    serve(start, app.stop)
