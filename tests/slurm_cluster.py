"""A real single-node Slurm (munged, slurmctld, slurmd) in a temporary directory, for the tests.

Everything lives under one directory: the munge key and socket, slurm.conf, state, spool and
logs, on free TCP ports, so several clusters can run at once (pytest -n auto). ``stop()`` ends
every daemon it started (by its own Popen handle) and waits for it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "srun", "scontrol", "sinfo")


def missing_binaries() -> list[str]:
    """The Slurm/munge programs not on PATH (the tests skip when any is missing)."""
    return [name for name in BINARIES if shutil.which(name) is None]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SlurmCluster:
    """One controller and one compute node named ``node`` on 127.0.0.1."""

    def __init__(self, root: Path, node: str = "pfnode", extra_conf: str = "") -> None:
        self.root = root
        self.node = node
        self.extra_conf = extra_conf
        self.conf = root / "slurm.conf"
        self.log_dir = root / "log"
        self.socket = root / "munge" / "munge.socket"
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def env(self) -> dict[str, str]:
        """Environment for srun/sinfo/scontrol against this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout_s: float = 30.0) -> None:
        for sub in ("munge", "state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)
        (self.root / "munge").chmod(0o711)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={self.socket}", f"--key-file={key}",
                               f"--pid-file={self.root / 'munge' / 'munged.pid'}", f"--seed-file={self.root / 'munge' / 'seed'}",
                               f"--log-file={self.log_dir / 'munged.log'}"])
        self._wait(lambda: self.socket.exists(), timeout_s, "munged did not create its socket")
        self.conf.write_text(self._slurm_conf())
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-N", self.node, "-f", str(self.conf)])
        self._wait(lambda: self.state() not in ("", "unknown", "down", "not_responding"), timeout_s,
                   "the node did not register with slurmctld")

    def _slurm_conf(self) -> str:
        r = self.root
        return "\n".join([
            "ClusterName=pftest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.log_dir / 'slurmctld.log'}",
            f"SlurmdLogFile={self.log_dir / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "KillWait=5",
            self.extra_conf,
            f"NodeName={self.node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()} "
            f"CPUs={os.cpu_count() or 1} RealMemory=1000 State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ])

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.log_dir / f"{name}.out", "wb") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               env=self.env, start_new_session=True))

    def _wait(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [str(p.args[0]) for p in self.procs if p.poll() is not None]  # type: ignore[index]  # argv lists
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited during start-up\n{self.logs()}")
            time.sleep(0.3)
        raise RuntimeError(f"{what} within {timeout_s:.0f} s\n{self.logs()}")

    def run(self, *argv: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env={**self.env, **(env or {})}, timeout=timeout)

    def state(self) -> str:
        """The node's state in lower case as sinfo prints it (``idle``, ``drained``, ...)."""
        result = self.run("sinfo", "-h", "-n", self.node, "-o", "%T", timeout=15)
        return result.stdout.strip().lower() if result.returncode == 0 else ""

    def reason(self) -> str:
        """The node's drain reason (``sinfo -R``), empty when none."""
        result = self.run("sinfo", "-R", "-h", "-n", self.node, "-o", "%E", timeout=15)
        return result.stdout.strip()

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                         for p in sorted(self.log_dir.glob("*")) if p.is_file())

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs.clear()
