"""Headers of RocketMQ 5's controller requests (codes 904 and 1001-1013), field names as in
apache/rocketmq 5.3.x ``remoting.protocol.header.controller`` (and ``namesrv`` for the
broker heartbeat).

Both sides live here (the controller decodes requests and encodes answers; ``ControllerClient``
does the reverse), so every class is declared with ``request_header``, which gives ``decode``
and ``ext``. Java's boxed fields (``Long``, ``Integer``) may be absent: they read as None.
``invokeTime`` fields are written by Java clients and ignored here.
"""

from __future__ import annotations

from ledgermq.protocol.header_codec import RequestHeader, boolean, int32, int64, request_header, text

__all__ = [
    "AlterSyncStateSetRequestHeader",
    "AlterSyncStateSetResponseHeader",
    "ApplyBrokerIdRequestHeader",
    "ApplyBrokerIdResponseHeader",
    "BrokerHeartbeatRequestHeader",
    "CleanControllerBrokerDataRequestHeader",
    "ElectMasterRequestHeader",
    "ElectMasterResponseHeader",
    "GetMetaDataResponseHeader",
    "GetNextBrokerIdRequestHeader",
    "GetNextBrokerIdResponseHeader",
    "GetReplicaInfoRequestHeader",
    "GetReplicaInfoResponseHeader",
    "NotifyBrokerRoleChangedRequestHeader",
    "RegisterBrokerToControllerRequestHeader",
    "RegisterBrokerToControllerResponseHeader",
]


@request_header
class AlterSyncStateSetRequestHeader(RequestHeader):
    """Body: SyncStateSet JSON (the new set and the SyncStateSet epoch it was computed from)."""

    broker_name: str = text("brokerName")
    master_broker_id: int = int64("masterBrokerId")
    master_epoch: int = int32("masterEpoch")


@request_header
class AlterSyncStateSetResponseHeader(RequestHeader):
    new_sync_state_set_epoch: int = int32("newSyncStateSetEpoch", absent=0)


@request_header
class ElectMasterRequestHeader(RequestHeader):
    """``brokerId`` -1 with ``designateElect`` false: the controller's own trigger (any member
    may win); a broker id with ``designateElect`` true: a planned election of that replica."""

    cluster_name: str = text("clusterName", absent="")
    broker_name: str = text("brokerName")
    broker_id: int = int64("brokerId", absent=-1)
    designate_elect: bool = boolean("designateElect")


@request_header
class ElectMasterResponseHeader(RequestHeader):
    master_broker_id: int | None = int64("masterBrokerId", absent=None)
    master_address: str | None = text("masterAddress", absent=None)
    master_epoch: int | None = int32("masterEpoch", absent=None)
    sync_state_set_epoch: int | None = int32("syncStateSetEpoch", absent=None)


@request_header
class GetReplicaInfoRequestHeader(RequestHeader):
    broker_name: str = text("brokerName")


@request_header
class GetReplicaInfoResponseHeader(RequestHeader):
    master_broker_id: int | None = int64("masterBrokerId", absent=None)
    master_address: str | None = text("masterAddress", absent=None)
    master_epoch: int | None = int32("masterEpoch", absent=None)


@request_header
class GetMetaDataResponseHeader(RequestHeader):
    """GET_METADATA_INFO's answer; also carried by CONTROLLER_NOT_LEADER answers, so a client
    learns the leader without a second round trip. ``peers`` is ``id:host:port;...;``."""

    group: str | None = text("group", absent=None)
    controller_leader_id: str | None = text("controllerLeaderId", absent=None)
    controller_leader_address: str | None = text("controllerLeaderAddress", absent=None)
    is_leader: bool = boolean("isLeader")
    peers: str | None = text("peers", absent=None)


@request_header
class BrokerHeartbeatRequestHeader(RequestHeader):
    cluster_name: str = text("clusterName")
    broker_addr: str = text("brokerAddr")
    broker_name: str = text("brokerName")
    broker_id: int | None = int64("brokerId", absent=None)
    epoch: int | None = int32("epoch", absent=None)
    max_offset: int | None = int64("maxOffset", absent=None)
    confirm_offset: int | None = int64("confirmOffset", absent=None)
    heartbeat_timeout_mills: int | None = int64("heartbeatTimeoutMills", absent=None)
    election_priority: int | None = int32("electionPriority", absent=None)


@request_header
class CleanControllerBrokerDataRequestHeader(RequestHeader):
    cluster_name: str | None = text("clusterName", absent=None)
    broker_name: str = text("brokerName")
    broker_controller_ids_to_clean: str | None = text("brokerControllerIdsToClean", absent=None)
    is_clean_living_broker: bool = boolean("isCleanLivingBroker")


@request_header
class GetNextBrokerIdRequestHeader(RequestHeader):
    cluster_name: str = text("clusterName")
    broker_name: str = text("brokerName")


@request_header
class GetNextBrokerIdResponseHeader(RequestHeader):
    cluster_name: str | None = text("clusterName", absent=None)
    broker_name: str | None = text("brokerName", absent=None)
    next_broker_id: int | None = int64("nextBrokerId", absent=None)


@request_header
class ApplyBrokerIdRequestHeader(RequestHeader):
    """``registerCheckCode`` is ``<brokerAddress>;<a value unique to this broker's disk>``."""

    cluster_name: str = text("clusterName")
    broker_name: str = text("brokerName")
    applied_broker_id: int = int64("appliedBrokerId")
    register_check_code: str = text("registerCheckCode")


@request_header
class ApplyBrokerIdResponseHeader(RequestHeader):
    cluster_name: str | None = text("clusterName", absent=None)
    broker_name: str | None = text("brokerName", absent=None)


@request_header
class RegisterBrokerToControllerRequestHeader(RequestHeader):
    cluster_name: str = text("clusterName")
    broker_name: str = text("brokerName")
    broker_id: int = int64("brokerId")
    broker_address: str = text("brokerAddress")


@request_header
class RegisterBrokerToControllerResponseHeader(RequestHeader):
    cluster_name: str | None = text("clusterName", absent=None)
    broker_name: str | None = text("brokerName", absent=None)
    master_broker_id: int | None = int64("masterBrokerId", absent=None)
    master_address: str | None = text("masterAddress", absent=None)
    master_epoch: int | None = int32("masterEpoch", absent=None)
    sync_state_set_epoch: int | None = int32("syncStateSetEpoch", absent=None)


@request_header
class NotifyBrokerRoleChangedRequestHeader(RequestHeader):
    """Controller -> broker (oneway); body: SyncStateSet JSON."""

    master_address: str | None = text("masterAddress", absent=None)
    master_epoch: int | None = int32("masterEpoch", absent=None)
    sync_state_set_epoch: int | None = int32("syncStateSetEpoch", absent=None)
    master_broker_id: int | None = int64("masterBrokerId", absent=None)
