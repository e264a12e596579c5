"""What taking a role means for a broker's services in controller mode (RocketMQ 5's
changeToMaster / changeToSlave), done on the parts the ``BrokerApp`` lends it (``RoleHost``:
the roles know which parts they touch, not the application that wires them).

Becoming **master**: stop copying (HA client, metadata sync); cut a record the copy left
half received; let dispatch catch up and continue every queue's offsets after what was
copied (``adopt_raw_tail``); the store takes writes in the master's flavour (SYNC_MASTER
with allAckInSyncStateSet, else brokerRole's); the HA service starts, beginning an epoch
numbered by the controller's master epoch at the log end; register as brokerId 0 at once;
then the master-only duties start (delayed delivery, transaction check-back, reading the
slaves' consumer offsets), as DLedger mode starts them on leadership.

Becoming **slave** (also a deposed master, and an old master that returns): writes are
refused at once (the service's role says so before this runs); master-only duties stop;
the HA service stops (sends still waiting for acknowledgements are answered
FLUSH_SLAVE_TIMEOUT, never SEND_OK); the store refuses puts; register with our slave id;
the HA client connects to the master the controller named (its HA address read from that
broker's own config, GET_BROKER_CONFIG: brokerIP2 or brokerIP1, haListenPort or
listenPort + 1), where the epoch handshake truncates whatever we hold beyond the point
both logs agree on; the metadata sync copies topics, offsets and delay offsets from it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Protocol

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.context import Broker
from ledgermq.broker.registration import Registrar
from ledgermq.broker.slave_sync import MasterOffsetReconciler, SlaveSynchronizer
from ledgermq.broker.transactions.check_service import TransactionCheckService
from ledgermq.config import BrokerRole, StoreConfig
from ledgermq.errors import LedgerError
from ledgermq.ha.master import HAService
from ledgermq.ha.slave import HAClient
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand

log = logging.getLogger(__name__)

__all__ = ["ControllerRoles", "RoleHost", "ha_address_of"]


class RoleHost(Protocol):
    """The broker parts a role change reads (properties) or replaces (plain attributes and
    ``make_current``, the one way its settings change)."""

    master_addr: str | None
    master_ha_addr: str | None

    def make_current(self, config: BrokerConfig | None = None, store_config: StoreConfig | None = None) -> None: ...

    @property
    def broker(self) -> Broker: ...
    @property
    def base_config(self) -> BrokerConfig: ...
    @property
    def registrar(self) -> Registrar: ...
    @property
    def client(self) -> RemotingClient: ...
    @property
    def txn_check(self) -> TransactionCheckService: ...
    @property
    def ha_service(self) -> HAService | None: ...
    @property
    def ha_client(self) -> HAClient | None: ...
    @property
    def slave_sync(self) -> SlaveSynchronizer | None: ...
    @property
    def offset_reconciler(self) -> MasterOffsetReconciler | None: ...


def ha_address_of(props: dict[str, str]) -> str | None:
    """A broker's HA address from its GET_BROKER_CONFIG properties, as it registers it."""
    host = props.get("brokerIP2") or props.get("brokerIP1")
    port = props.get("haListenPort", "0")
    listen = props.get("listenPort", "")
    if not host or not port.isdigit() or not listen.isdigit():
        return None
    return f"{host}:{int(port) or int(listen) + 1}"


def parse_properties_text(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


class ControllerRoles:
    """``RoleSwitch`` over a ``BrokerApp`` (called under the service's lock, one at a time)."""

    def __init__(self, app: RoleHost, master_role: BrokerRole) -> None:
        self.app = app
        self.master_role = master_role
        self._resolve: asyncio.Task[None] | None = None

    def _set_store_role(self, role: BrokerRole) -> None:
        app = self.app
        app.make_current(store_config=dataclasses.replace(app.broker.store_config, broker_role=role))

    def _set_broker_id(self, broker_id: int) -> None:
        app = self.app
        app.make_current(dataclasses.replace(app.base_config, broker_id=broker_id))

    async def become_master(self, master_epoch: int) -> None:
        app = self.app
        b = app.broker
        await self._stop_slave_side()
        store = b.native_store
        end = await asyncio.to_thread(store.whole_records_end)
        if end < store.max_phy_offset:
            log.info("controller mode: cutting a partly copied record at %d (log end %d)", end, store.max_phy_offset)
            await asyncio.to_thread(store.truncate_after_offset, end)
        await asyncio.to_thread(store.adopt_raw_tail)
        self._set_store_role(self.master_role)
        ha = app.ha_service
        assert ha is not None
        ha.controller_epoch = master_epoch
        ha.sync_master = self.master_role is BrokerRole.SYNC_MASTER
        await ha.start()
        b.ha = ha
        self._set_broker_id(0)
        app.master_addr = None
        if b.schedule is not None:
            b.schedule.start()
        if b.timer is not None:  # timers are delivered by the master only (docs/timers.md)
            b.timer.start()
        app.txn_check.start()
        if app.offset_reconciler is not None:
            app.offset_reconciler.start()

    async def become_slave(self, master_addr: str | None, broker_id: int) -> None:
        app = self.app
        b = app.broker
        if b.schedule is not None:
            await b.schedule.stop()
        if b.timer is not None:
            await b.timer.stop()
        await app.txn_check.stop()
        if app.offset_reconciler is not None:
            await app.offset_reconciler.stop()
        ha = app.ha_service
        if ha is not None and b.ha is not None:
            b.ha = None
            await ha.stop()
        self._set_store_role(BrokerRole.SLAVE)
        self._set_broker_id(broker_id)
        await self._stop_slave_side()
        app.master_addr = master_addr
        app.master_ha_addr = None
        client = app.ha_client
        if client is not None:
            client.broker_id = broker_id
            client.start()
        if app.slave_sync is not None:
            app.slave_sync.start()
        if master_addr is not None:
            self._resolve = asyncio.ensure_future(self._resolve_ha_address(master_addr))

    def settled(self) -> None:
        self.app.registrar.kick()

    async def _stop_slave_side(self) -> None:
        app = self.app
        if self._resolve is not None:
            self._resolve.cancel()
            await asyncio.gather(self._resolve, return_exceptions=True)
            self._resolve = None
        if app.slave_sync is not None:
            await app.slave_sync.stop()
        if app.ha_client is not None:
            await app.ha_client.stop()

    async def stop(self) -> None:
        if self._resolve is not None:
            self._resolve.cancel()
            await asyncio.gather(self._resolve, return_exceptions=True)

    async def _resolve_ha_address(self, master_addr: str) -> None:
        """Ask the master for its HA address until it answers (it may still be starting)."""
        app = self.app
        pause = 0.1
        while True:
            try:
                resp = await app.client.invoke(
                    master_addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG), timeout=1.0
                )
                if resp.code == ResponseCode.SUCCESS:
                    addr = ha_address_of(parse_properties_text(resp.body.decode()))
                    if addr:
                        log.info("controller mode: master %s replicates on %s", master_addr, addr)
                        app.master_ha_addr = addr
                        if app.ha_client is not None:
                            app.ha_client.kick()
                        return
                problem = f"{resp.code} {resp.remark}"
            except (LedgerError, OSError, TimeoutError) as exc:
                problem = str(exc)
            log.info("controller mode: no HA address from master %s yet (%s)", master_addr, problem)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)
