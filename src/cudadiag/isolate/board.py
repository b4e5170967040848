"""Where the agents of a job across nodes leave what each one saw, for the others to read:
the rendezvous store torchrun's c10d backend uses (a TCPStore at the endpoint), or a folder
every node sees (`--record-dir`). Both are a few named values; a key is written by one
agent only (its own node's), so no two agents ever write the same key."""

from __future__ import annotations

import os
import socket
import time
from abc import ABC, abstractmethod
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from cudadiag.durable import PRIVATE_FILE, replace_atomically
from cudadiag.errors import NodesError
from cudadiag.i18n import _

RETRY_S = 1.0
"""How often a node that waits for the store's holder tries again."""

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

    from cudadiag.isolate.nodeplan import NodePlan


class Board(ABC):
    """Named values the agents of one job share."""

    @abstractmethod
    def put(self, key: str, value: bytes) -> None:
        """Write `key` (only this node's keys are written here)."""

    @abstractmethod
    def read(self, key: str) -> bytes | None:
        """The value of `key`, None while no agent has written it."""

    @abstractmethod
    def claim(self, key: str) -> bool:
        """Take `key` for this agent: True the first time any agent asks, False after."""

    def beat(self, key: str, count: int) -> None:
        """Say this agent is alive: `key` holds how many times it said so."""
        self.put(key, str(count).encode())

    def beats(self, key: str) -> int:
        """How many times the agent whose key it is said it was alive (0: never)."""
        value = self.read(key)
        return int(value) if value and value.isdigit() else 0


class StoreBoard(Board):
    """The keys under `cudadiag/RUN_ID/` of the TCPStore at the c10d endpoint."""

    def __init__(self, store: Store, run_id: str) -> None:
        from torch._C._distributed_c10d import PrefixStore

        self.store = PrefixStore(f"cudadiag/{run_id}/", store)

    def put(self, key: str, value: bytes) -> None:
        """Set `key`."""
        self.store.set(key, value.decode())

    def read(self, key: str) -> bytes | None:
        """Get `key` without waiting for it."""
        return self.store.get(key) if self.store.check([key]) else None

    def claim(self, key: str) -> bool:
        """Count the claims of `key` atomically in the store."""
        return int(self.store.add(key, 1)) == 1


class FolderBoard(Board):
    """Files in `DIR/cudadiag-RUN_ID/`, one a key, written atomically."""

    def __init__(self, folder: Path, run_id: str) -> None:
        self.folder = folder / f"cudadiag-{run_id}"
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise NodesError(_("--record-dir {folder}: cannot make {name} there: "
                               "{error}").format(folder=folder, name=self.folder.name,
                                                 error=exc.strerror)) from None

    def _path(self, key: str) -> Path:
        return self.folder / key.replace("/", "-")

    def put(self, key: str, value: bytes) -> None:
        """Replace the key's file."""
        replace_atomically(self._path(key), value)

    def read(self, key: str) -> bytes | None:
        """The key's file, None while there is none."""
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def claim(self, key: str) -> bool:
        """Create the key's file, only if it does not exist yet."""
        try:
            os.close(os.open(self._path(key), os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                             PRIVATE_FILE))
        except FileExistsError:
            return False
        return True


def host_or_join(plan: NodePlan) -> tuple[Store, bool]:
    """A connection to the rendezvous store at the plan's endpoint and whether this process
    holds it: the agent on the endpoint's host holds it, as torchrun's agent would (torchrun's
    own agents then connect to it), so it outlives the job until every node has read the
    others' reports. Raises NodesError when no store answers within the plan's join
    timeout."""
    from torch._C._distributed_c10d import TCPStore
    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname

    wait = timedelta(seconds=plan.join_timeout)
    if _matches_machine_hostname(plan.host):
        try:
            return TCPStore(plan.host, plan.port, is_master=True, multi_tenant=True,
                            wait_for_workers=False, timeout=wait), True
        except (RuntimeError, ValueError):
            pass  # another agent on this machine holds it already
    return join(plan), False


def join(plan: NodePlan) -> Store:
    """A client connection to the store at the plan's endpoint. Raises NodesError when none
    answers within the plan's join timeout."""
    from torch._C._distributed_c10d import TCPStore

    try:
        _wait_for_listener(plan.host, plan.port, plan.join_timeout)
        return TCPStore(plan.host, plan.port, is_master=False,
                        timeout=timedelta(seconds=plan.join_timeout))
    except (RuntimeError, ValueError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise NodesError(
            _("no rendezvous store answered at {host}:{port} within {seconds} s (node {node} "
              "of {nnodes}): start the agent of the endpoint's host, check the address, the "
              "port and the firewall (--rdzv-conf join_timeout=S waits longer). {error}").format(
                host=plan.host, port=plan.port, seconds=f"{plan.join_timeout:g}",
                node=plan.node_rank, nnodes=plan.nnodes, error=first)) from None


def _wait_for_listener(host: str, port: int, timeout: float) -> None:
    """Return once something accepts connections at host:port; raises OSError (TimeoutError
    among them) when nothing does within `timeout` seconds. Asked before the store's client
    is made, whose own retries print pages of C++ frames."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(_("nothing accepted a connection at {host}:{port}").format(
                host=host, port=port))
        try:
            socket.create_connection((host, port), timeout=min(left, RETRY_S * 5)).close()
            return
        except OSError:
            time.sleep(min(RETRY_S, max(deadline - time.monotonic(), 0)))
