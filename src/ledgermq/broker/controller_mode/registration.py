"""A broker's identity and registration with the controller (RocketMQ 5's ReplicasManager start-up).

The controller-assigned id comes from ``brokerIdentity`` or, the first time, from
CONTROLLER_GET_NEXT_BROKER_ID then CONTROLLER_APPLY_BROKER_ID with a registerCheckCode kept
in ``brokerIdentity-temp`` (identity.py), so a broker that crashes in between applies again
for the same id with the same code. Then CONTROLLER_REGISTER_BROKER, whose answer names the
master if it is alive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.controller_mode.identity import BrokerIdentity, IdentityFiles
from ledgermq.broker.controller_mode.view import MasterView
from ledgermq.clock import Clock
from ledgermq.controller.client import ControllerClient, ControllerResponseError
from ledgermq.errors import LedgerError
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.controller_body import SyncStateSet
from ledgermq.protocol.headers_controller import (
    ApplyBrokerIdRequestHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
)

__all__ = ["Registration"]

log = logging.getLogger(__name__)

RC = ResponseCode


class Registration:
    def __init__(
        self, broker_cfg: BrokerConfig, store_root: str | Path, controllers: ControllerClient, clock: Clock
    ) -> None:
        self.broker_cfg = broker_cfg
        self.files = IdentityFiles(store_root)
        self.controllers = controllers
        self.clock = clock

    async def register_until_done(
        self,
        on_id: Callable[[int], None],
        stopping: Callable[[], bool],
        problem: Callable[[str], None],
        pauses: tuple[float, float],
    ) -> MasterView | None:
        """``register``, again after a growing pause (``pauses``: the first, the longest) while
        it fails, until it succeeds or ``stopping()`` (None)."""
        pause = pauses[0]
        while not stopping():
            try:
                return await self.register(on_id)
            except (LedgerError, OSError, TimeoutError) as exc:
                what = f"registering with the controller: {exc}"
                problem(what)
                log.warning("controller mode: %s; again in %.1f s", what, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, pauses[1])
        return None

    async def register(self, on_id: Callable[[int], None]) -> MasterView:
        """Our id (``on_id`` is told it before anything else is asked), then
        CONTROLLER_REGISTER_BROKER; what its answer says of the group."""
        cfg = self.broker_cfg
        files = self.files
        identity = await asyncio.to_thread(files.load)
        if identity is not None:
            files.check_matches(identity, cfg.cluster_name, cfg.broker_name)
        else:
            identity = await self._apply_for_id()
        on_id(identity.broker_id)
        hdr = RegisterBrokerToControllerRequestHeader(
            cfg.cluster_name, cfg.broker_name, identity.broker_id, cfg.broker_addr
        )
        resp = await self.controllers.invoke(RemotingCommand.request(RequestCode.CONTROLLER_REGISTER_BROKER, hdr.ext()))
        if resp.code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED and identity.register_check_code:
            log.warning(
                "controller mode: the controller does not know broker %d; applying for it again", identity.broker_id
            )
            await self._apply_broker_id(identity)
            resp = await self.controllers.invoke(
                RemotingCommand.request(RequestCode.CONTROLLER_REGISTER_BROKER, hdr.ext())
            )
        if resp.code != RC.SUCCESS:
            raise ControllerResponseError(resp.code, resp.remark)
        ans = RegisterBrokerToControllerResponseHeader.from_ext(resp.ext_fields)
        sss = SyncStateSet.decode(resp.body) if resp.body else SyncStateSet(frozenset(), 0)
        log.info(
            "controller mode: registered as broker %d of %s (master %s, epoch %s)",
            identity.broker_id,
            cfg.broker_name,
            ans.master_broker_id,
            ans.master_epoch,
        )
        return MasterView(
            ans.master_broker_id,
            ans.master_address,
            ans.master_epoch or 0,
            sss.sync_state_set,
            ans.sync_state_set_epoch or sss.sync_state_set_epoch,
        )

    async def _apply_for_id(self) -> BrokerIdentity:
        cfg = self.broker_cfg
        files = self.files
        temp = await asyncio.to_thread(files.load_temp)
        if temp is not None:
            files.check_matches(temp, cfg.cluster_name, cfg.broker_name)
        else:
            hdr = GetNextBrokerIdRequestHeader(cfg.cluster_name, cfg.broker_name)
            resp = await self.controllers.invoke(
                RemotingCommand.request(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, hdr.ext())
            )
            if resp.code != RC.SUCCESS:
                raise ControllerResponseError(resp.code, resp.remark)
            next_id = GetNextBrokerIdResponseHeader.from_ext(resp.ext_fields).next_broker_id
            if next_id is None:
                raise ControllerResponseError(resp.code, "CONTROLLER_GET_NEXT_BROKER_ID answered no id")
            code = f"{cfg.broker_addr};{self.clock.wall_ms()}"
            temp = BrokerIdentity(cfg.cluster_name, cfg.broker_name, next_id, code)
            await asyncio.to_thread(files.save_temp, temp)
        try:
            await self._apply_broker_id(temp)
        except ControllerResponseError as exc:
            if exc.code == RC.CONTROLLER_BROKER_ID_INVALID:  # taken meanwhile: ask for the next one
                await asyncio.to_thread(files.temp_path.unlink, True)
            raise
        await asyncio.to_thread(files.commit, temp)
        log.info("controller mode: the controller granted broker id %d (%s)", temp.broker_id, files.path)
        return temp

    async def _apply_broker_id(self, identity: BrokerIdentity) -> None:
        hdr = ApplyBrokerIdRequestHeader(
            identity.cluster_name, identity.broker_name, identity.broker_id, identity.register_check_code
        )
        resp = await self.controllers.invoke(RemotingCommand.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, hdr.ext()))
        if resp.code != RC.SUCCESS:
            raise ControllerResponseError(resp.code, resp.remark)
