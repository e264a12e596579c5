"""What a broker starts as, from its settings: a DLedger member starts as a follower, a
controller-mode broker as a slave that copies nothing until the controller names its role."""

from __future__ import annotations

import dataclasses

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.controller_mode.config import ControllerModeConfig
from ledgermq.broker.dledger import check_settings, follower_broker_id
from ledgermq.config import BrokerRole, StoreConfig

__all__ = ["StartingRole"]


@dataclasses.dataclass(frozen=True, slots=True)
class StartingRole:
    """What a broker starts as, which is not always what its file says: in controller mode
    a slave that copies nothing until the controller names a role (``master_role`` is what
    it becomes when named master), in DLedger mode a follower under its follower id until
    the Raft leader's broker becomes the master."""

    config: BrokerConfig
    store_config: StoreConfig
    controller: ControllerModeConfig | None  # set only when controller mode is enabled
    master_role: BrokerRole | None  # controller mode: SYNC_ or ASYNC_MASTER, once master

    @classmethod
    def of(
        cls, config: BrokerConfig, store_config: StoreConfig, controller_mode: ControllerModeConfig | None
    ) -> StartingRole:
        ctl = controller_mode if controller_mode is not None and controller_mode.enable else None
        master_role = BrokerRole.SYNC_MASTER if ctl is not None and ctl.all_ack_in_sync_state_set else None
        if ctl is not None:  # no role until the controller gives one: a slave that copies nothing yet
            master_role = master_role or (
                BrokerRole.SYNC_MASTER
                if store_config.broker_role is BrokerRole.SYNC_MASTER
                else BrokerRole.ASYNC_MASTER
            )
            store_config = dataclasses.replace(store_config, broker_role=BrokerRole.SLAVE)
        if store_config.enable_dleger_commit_log:  # starts as a slave; the Raft leader becomes the master
            check_settings(store_config)
            config = dataclasses.replace(config, broker_id=follower_broker_id(store_config.dleger_self_id))
        return cls(config, store_config, ctl, master_role)
