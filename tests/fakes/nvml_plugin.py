"""Test-only pytest plugin (``-p tests.fakes.nvml_plugin``): the run's NVML child talks to a fake
NVML C library (``tests/fakes/nvml.py``) instead of the driver's. It never ships with preflight.

    --fake-nvml=8x-h100-sxm                     the machine (tests/fakes/nvml_profiles.py)
    --fake-nvml-faults='{"ecc_volatile": {"3": 2}}'   Faults fields as JSON (GPU keys may be strings)
    --fake-torch-count=7                        what torch.cuda.device_count() answers (default: agree)
    --fake-torch-cpu                            torch is a CPU-only build

It answers ``pytest_preflight_transports`` with an :class:`~preflight.probe.nvml_transport.NvmlTransport`
naming the fake; everything after that (the child, its deadline, pynvml) is what preflight does on a
real node. The filesystem root is the machine's sysfs as the kernel lays out its PCI devices: each GPU
(``vendor`` 0x10de, ``class`` 0x030200, a 3D controller) and each NVSwitch the host sees (0x068000, a
bridge), as ``lspci -n`` shows them on HGX nodes (tests/test_gpu_presence.py). The job's torch probe is answered as a CUDA torch would on that machine: its
``device_count()`` is what CUDA_VISIBLE_DEVICES leaves of the fake's GPUs (torch reads the variable
the same way, ``torch/cuda/__init__.py`` ``_parse_visible_devices``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from preflight.node.transports import Transports
from preflight.parse.visible_devices import parse_device_order, parse_visible_devices, resolve_visible_devices
from preflight.probe.nvml_transport import NvmlTransport
from tests.fakes.fake_torch import cuda_answer, real_answer, torch_runner
from preflight.probe.command import run_command
from preflight.probe.nvml_probe import take_snapshot
from tests.fakes.nvml import FACTORY, Faults, library_argument, spec_for
from tests.fakes.nvml_profiles import ServerSpec

SYSFS_KEY = pytest.StashKey[Path]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("preflight-fakes", "preflight test fakes (never shipped)")
    group.addoption("--fake-nvml", default=None, help="fake NVML machine profile")
    group.addoption("--fake-nvml-faults", default="{}", help="faults as a JSON object of Faults fields")
    group.addoption("--fake-torch-count", type=int, default=None, help="torch.cuda.device_count() answer")
    group.addoption("--fake-torch-cpu", action="store_true", default=False, help="torch is a CPU-only build")


def _transport(config: pytest.Config) -> NvmlTransport | None:
    """The fake machine's NVML transport; None without --fake-nvml."""
    profile = config.getoption("fake_nvml")
    if profile is None:
        return None
    spec_for(profile)  # an unknown profile is a clear error here, not in the child
    faults = Faults.from_json(json.loads(config.getoption("fake_nvml_faults")))
    return NvmlTransport(FACTORY, library_argument(profile, faults), f"fake:{profile}")


def _visible_count(transport: NvmlTransport) -> int:
    """What ``torch.cuda.device_count()`` answers on the fake machine under this environment: the
    fake's GPUs (walked by the real NVML child, bounded) that CUDA_VISIBLE_DEVICES leaves."""
    snapshot = take_snapshot(transport, run_command, timeout_s=20)
    identities = [i for i in (g.identity() for g in snapshot.gpus) if i is not None]
    if not identities:
        return 0
    try:
        order = parse_device_order(os.environ.get("CUDA_DEVICE_ORDER"))
    except ValueError:
        order = parse_device_order(None)
    return resolve_visible_devices(parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES")), identities,
                                   order).count


def sysfs_root(spec: ServerSpec, root: Path) -> Path:
    """``root/sys/bus/pci/devices/<bdf>/{vendor,class}`` for the machine's GPUs and host-visible NVSwitches."""
    switches = spec.nvswitch_bus_ids if spec.nvswitch_on_pci else ()
    for bus_id, klass in [(b, "0x030200") for b in spec.bus_ids] + [(b, "0x068000") for b in switches]:
        folder = root / "sys" / "bus" / "pci" / "devices" / bus_id[4:].lower()  # sysfs: 4-digit domain
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "vendor").write_text("0x10de\n")
        (folder / "class").write_text(klass + "\n")
    return root


def pytest_preflight_transports(config: pytest.Config) -> Transports | None:
    """The fake NVML and sysfs, and the job's torch as the fake machine's driver would have it count."""
    transport = _transport(config)
    if transport is None:
        return None
    root = config.stash[SYSFS_KEY] = sysfs_root(spec_for(config.getoption("fake_nvml")),
                                                Path(tempfile.mkdtemp(prefix="preflight-fake-sysfs-")))
    if config.getoption("fake_torch_cpu"):
        return Transports(nvml=transport, run=torch_runner(real_answer), root=root)
    count = config.getoption("fake_torch_count")
    return Transports(nvml=transport, run=torch_runner(lambda: cuda_answer(_visible_count(transport) if count is None
                                                                           else count)), root=root)


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(SYSFS_KEY, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
