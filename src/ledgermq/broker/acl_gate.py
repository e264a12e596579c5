"""The broker's access check (``aclEnable=true``): plain_acl.yml loaded, watched, and asked
about every request before its processor runs.

Where the file is: ``aclFile`` when set (a relative path is taken from ``rocketmqHome``
when that is known, else from the working directory); otherwise
``<rocketmqHome or $ROCKETMQ_HOME>/conf/plain_acl.yml``, RocketMQ's place for it. A missing
or invalid file stops the broker at start with a StartupError naming the file and the
fault. While the broker runs, the file's identity (inode, size, mtime) is polled every
``POLL_INTERVAL_S``; a change is loaded and takes effect for the next request. A change
that does not load (a half-written file, a typo, the file gone) is logged and the last
good configuration stays in force until a good version appears.

A refused request is answered with NO_PERMISSION (16) and the reason as remark (RocketMQ
4.9 answers SYSTEM_ERROR (1) with the AclException text; clients treat both codes alike),
and logged at most once a minute per peer and reason.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from ledgermq.acl.decide import decide
from ledgermq.acl.model import AclConfig, parse_acl_text
from ledgermq.aio.periodic import Periodic
from ledgermq.broker.config import BrokerConfig
from ledgermq.errors import ConfigError, StartupError
from ledgermq.net.connection import Connection
from ledgermq.protocol.codes import ResponseCode, request_name
from ledgermq.protocol.command import RemotingCommand
from ledgermq.util.ratelog import RateLimitedLog

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.5
DEFAULT_RELATIVE = Path("conf") / "plain_acl.yml"
FileId = tuple[int, int, int, int]


def acl_file_path(config: BrokerConfig, environ: dict[str, str] | None = None) -> Path:
    """Where this broker's plain_acl.yml is (see the module docstring); ConfigError if nowhere."""
    env = os.environ if environ is None else environ
    home = config.rocketmq_home or env.get("ROCKETMQ_HOME", "")
    if config.acl_file:
        path = Path(config.acl_file).expanduser()
        return path if path.is_absolute() or not home else Path(home) / path
    if not home:
        raise ConfigError("aclEnable=true needs aclFile, rocketmqHome or ROCKETMQ_HOME to find plain_acl.yml")
    return Path(home) / DEFAULT_RELATIVE


def _file_id(path: Path) -> FileId | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _host(peer: str) -> str:
    """The address without its port (``1.2.3.4:5`` or ``::1:5``), as RocketMQ strips it."""
    host, sep, _port = peer.rpartition(":")
    return host if sep else peer


class AclGate:
    def __init__(self, path: Path, poll_interval: float = POLL_INTERVAL_S) -> None:
        self.path = path
        self.poll_interval = poll_interval
        self.config = AclConfig()
        self.loaded_id: FileId | None = None
        self.reloads = 0  # successful loads after the first: tests and logs
        self.refused = 0
        self._rate = RateLimitedLog()
        self._watch = Periodic("acl-file-watch", self.poll_once, poll_interval)
        self._seen_bad: FileId | None = None

    # -- loading ---------------------------------------------------------------------------
    def _read(self) -> tuple[AclConfig, FileId | None]:
        before = _file_id(self.path)
        config = parse_acl_text(self.path.read_bytes())
        return config, before

    async def start(self) -> None:
        """Load the file (StartupError if missing or invalid), then watch it."""
        try:
            self.config, self.loaded_id = await asyncio.to_thread(self._read)
        except FileNotFoundError:
            raise StartupError(f"aclEnable=true but the ACL file {self.path} does not exist (set aclFile)") from None
        except (OSError, ConfigError) as exc:
            raise StartupError(f"aclEnable=true but the ACL file {self.path} cannot be used: {exc}") from None
        log.info(
            "ACL on: %s (%d accounts, %d global white patterns)",
            self.path,
            len(self.config.accounts),
            len(self.config.global_white),
        )
        self._watch.start()

    async def stop(self) -> None:
        await self._watch.stop()

    async def poll_once(self) -> bool:
        """Reload if the file changed; whether a new configuration took effect."""
        current = _file_id(self.path)
        if current == self.loaded_id or current == self._seen_bad:
            return False
        if current is None:
            log.error("ACL file %s is gone; the last loaded configuration stays in force", self.path)
            self._seen_bad = None
            self.loaded_id = None
            return False
        try:
            config, read_id = await asyncio.to_thread(self._read)
        except (OSError, ConfigError) as exc:
            log.error("ACL file %s changed but cannot be used (%s); the previous one stays in force", self.path, exc)
            self._seen_bad = current
            return False
        self.config, self.loaded_id, self._seen_bad = config, read_id, None
        self.reloads += 1
        log.info("ACL file %s reloaded (%d accounts)", self.path, len(config.accounts))
        return True

    # -- the check -------------------------------------------------------------------------
    def check(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """None to let the request through; otherwise the NO_PERMISSION answer."""
        try:
            decision = decide(self.config, cmd.code, cmd.ext_fields, cmd.body, _host(conn.peer))
        except Exception as exc:  # fail closed: a request we cannot judge is not let through
            log.exception("ACL check of %s from %s failed", request_name(cmd.code), conn.peer)
            return cmd.response(ResponseCode.NO_PERMISSION, f"ACL check failed: {type(exc).__name__}: {exc}")
        if decision.allowed:
            return None
        self.refused += 1
        self._rate.log(
            log,
            logging.WARNING,
            (conn.peer, decision.reason),
            "ACL refused %s from %s: %s",
            request_name(cmd.code),
            conn.peer,
            decision.reason,
        )
        return cmd.response(ResponseCode.NO_PERMISSION, decision.reason)
