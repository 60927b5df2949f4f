"""Catalogue entries: the GPUs' interconnect (topology, NVLink, peer-to-peer) and NCCL all-reduce."""

from __future__ import annotations

from preflight.codes.entry import Code, Kind

AREA = "Topology, peer-to-peer and NCCL"

CODES = (
    Code("TOPOLOGY_UNREADABLE",
         "GPUs are present but `nvidia-smi topo -m` gave no topology matrix preflight could read.",
         "The layout checks cannot say whether the GPUs talk over NVLink or PCIe, so the bandwidth to expect is "
         "unknown.",
         "Run `nvidia-smi topo -m` by hand; the evidence quotes what failed (a missing nvidia-smi, an error, "
         "output of an unknown shape).", kind=Kind.BLOCKER),
    Code("TOPOLOGY_PCIE_ONLY",
         "No NVLink between the job's GPUs, and the plan is link-bound (--model-params with FSDP/ZeRO-3): the "
         "summary gives the seconds per step the link costs. A PCIe node without such a plan is a PASS.",
         "All-reduce runs at PCIe speed (roughly 15-45 GB/s bus bandwidth against 200+ over NVSwitch), so "
         "communication-heavy strategies (FSDP, ZeRO-3) spend much of each step waiting.",
         "Prefer DDP or ZeRO-1/2, all-reduce less often (gradient accumulation), keep a small job on one CPU "
         "socket, or rent an NVSwitch (SXM) node if communication dominates.", kind=Kind.COST),
    Code("TOPOLOGY_NVLINK_PAIRS_ONLY",
         "NVLink joins the job's GPUs in pairs (bridges) only, the pairs reach each other over PCIe, and the plan "
         "is link-bound (the seconds per step are in the summary).",
         "A ring all-reduce over all the GPUs crosses PCIe, so collectives run near PCIe speed.",
         "As for TOPOLOGY_PCIE_ONLY; keep tensor parallelism inside a bridged pair.", kind=Kind.COST),
    Code("TOPOLOGY_RING_CROSSES_PCIE",
         "The job's GPUs have some NVLinks but no ring through all of them stays on NVLink, and the plan is "
         "link-bound (the seconds per step are in the summary).",
         "NCCL's ring crosses a PCIe (or cross-socket) hop, which sets the pace of every all-reduce.",
         "As for TOPOLOGY_PCIE_ONLY; choosing GPUs that form an NVLink ring (CUDA_VISIBLE_DEVICES) avoids it.",
         kind=Kind.COST),
    Code("TOPOLOGY_SOURCES_DISAGREE",
         "NVML and `nvidia-smi topo -m` describe the GPUs or a GPU pair differently.",
         "One of them is wrong about the links, often because the NVSwitch fabric manager is down or P2P is "
         "blocked in a VM; a GPU count that changes points to a GPU falling off the bus.",
         "Trust the peer-to-peer copy test; check `nvidia-smi nvlink --status`, `nvidia-smi topo -p2p n` and "
         "`sudo dmesg | grep -i xid`.", kind=Kind.BLOCKER),
    Code("NVLINK_UNEVEN",
         "In the topology matrix some GPUs have fewer NVLinks to their peers than the best GPU.",
         "A link may be down: every collective through that GPU runs slower, and the whole job with it.",
         "Confirm with `nvidia-smi nvlink --status`; down links need a GPU reset, a reboot or a hardware ticket "
         "(ignore it when that GPU has no bridge by design).", kind=Kind.HARDWARE),
    Code("FABRIC_NOT_READY",
         "On an NVSwitch board the GPU's fabric registration is not complete (NVML fabric state Not Started or In "
         "Progress, or Completed with an error): the fabric manager is not running, failed or does not match the "
         "driver.",
         "CUDA does not start on these GPUs (error 802, system not yet initialized) or NCCL falls back to PCIe; "
         "the state stays In Progress until the fabric manager runs (NVIDIA/NVSentinel#889).",
         "`sudo systemctl status nvidia-fabricmanager` and `journalctl -u nvidia-fabricmanager`; install the fabric "
         "manager of the driver's exact version, restart it, and check `nvidia-smi -q | grep -i -A2 fabric` shows "
         "Completed; or ask the provider.", kind=Kind.BLOCKER),
    Code("NVLINK_ALL_DOWN",
         "NVLinks are expected (NVSwitches on the bus or at the links' far end, a bridged peer, peers of the "
         "same model, or --expect-nvlinks) but none of the job's is up.",
         "NCCL falls back to PCIe or host memory: all-reduce runs a fraction of the node's speed.",
         "Check `nvidia-smi nvlink --status` and, on NVSwitch systems, `systemctl status nvidia-fabricmanager`; a "
         "GPU reset or reboot may bring the links up.", kind=Kind.HARDWARE),
    Code("NVLINK_LINKS_MISSING",
         "A GPU has fewer active NVLinks than its peers (or than --expect-nvlinks).",
         "Every collective through that GPU slows down, and the job runs at the pace of its slowest link.",
         "`nvidia-smi nvlink --status -i <index>` shows which links are down; reset the GPU or reboot, and if "
         "links stay down open a hardware ticket with the GPU's serial or reseat the bridge.", kind=Kind.HARDWARE),
    Code("NVLINK_QUERY_FAILED",
         "NVML could not report the NVLinks of a GPU or the link between a pair (the check cannot decide).",
         "Whether the links work is unknown.",
         "Run `nvidia-smi nvlink --status` and `nvidia-smi topo -p2p n`; the evidence names the failed query.",
         kind=Kind.BLOCKER),
    Code("P2P_COPY_HUNG",
         "The peer-to-peer copy test hung while copying between two GPUs.",
         "A training job's NCCL traffic over the same path hangs the same way, until the process-group timeout.",
         "Check `nvidia-smi topo -p2p r`; with PCIe ACS or the IOMMU on, disable ACS or boot with iommu=pt (or ask "
         "the provider); as a workaround run the job with NCCL_P2P_DISABLE=1.", kind=Kind.HARDWARE),
    Code("P2P_TEST_CRASHED",
         "The peer-to-peer copy test process crashed.",
         "Direct GPU-to-GPU copies fail on this node; NCCL would use them.",
         "Read the error in the evidence; then as for P2P_COPY_HUNG.", kind=Kind.BLOCKER),
    Code("P2P_COPY_FAILED",
         "A copy between two GPUs raised an error.",
         "NCCL's P2P transport uses the same copies: collectives fail or hang.",
         "As for P2P_COPY_HUNG.", kind=Kind.HARDWARE),
    Code("P2P_DATA_CORRUPT",
         "Data copied between two GPUs arrived with wrong values.",
         "Silent corruption: gradients exchanged over that path are wrong and the model diverges without an "
         "error.",
         "Do not train on this node until fixed; as for P2P_COPY_HUNG (NCCL_P2P_DISABLE=1 is a correct, slower "
         "workaround); report the node.", kind=Kind.HARDWARE),
    Code("P2P_NVLINK_NOT_USABLE",
         "nvidia-smi shows NVLink between GPUs but CUDA reports no peer access between them.",
         "NCCL cannot use the NVLinks and falls back to a much slower path.",
         "On NVSwitch systems start nvidia-fabricmanager (its version must match the driver); check "
         "`nvidia-smi nvlink --status` and `nvidia-smi topo -p2p n`.", kind=Kind.HARDWARE),
    Code("P2P_NOT_SUPPORTED",
         "Some GPU pairs have no peer access: copies go through host memory.",
         "NCCL uses shared memory instead of direct P2P, so all-reduce bandwidth is lower.",
         "Consumer GPUs and some VMs do not allow P2P; if these GPUs should, check ACS/IOMMU settings and "
         "`nvidia-smi topo -p2p r`.", kind=Kind.COST),
    Code("P2P_SLOW_PAIR",
         "A GPU pair copies at under half the median of pairs on the same kind of link.",
         "A degraded link (an NVLink down, a PCIe link trained low) slows every collective through it.",
         "Compare `nvidia-smi nvlink --status` and `nvidia-smi -q -d PCI` for the GPUs named; reseat or report the "
         "slow GPU.", kind=Kind.HARDWARE),
    Code("NCCL_ALLREDUCE_FAILED",
         "The all-reduce sweep did not complete (a rank hung or crashed), with P2P and, when compared, without "
         "it.",
         "All-reduce is the collective every DDP/FSDP/ZeRO step depends on: the job would hang or crash at its "
         "first step.",
         "Read each rank's lines in the evidence or run `preflight nccl-log <saved NCCL_DEBUG=INFO log>`; common "
         "causes: a driver/torch CUDA mismatch, the fabric manager down on HGX, a small /dev/shm in a container, "
         "a GPU in a bad state.", kind=Kind.BLOCKER),
    Code("NCCL_ALLREDUCE_WRONG_RESULT",
         "All-reduce completed but returned values that differ from what the ranks contributed.",
         "Silent data corruption: gradients are wrong and training diverges without an error.",
         "Do not train on this node. Retry with NCCL_P2P_DISABLE=1 to see whether P2P is the cause, check ECC and "
         "remapped rows (`nvidia-smi -q`), and report the node.", kind=Kind.HARDWARE),
    Code("NCCL_BUSBW_LOW",
         "Peak all-reduce bus bandwidth is below 70% (WARN) or 40% (FAIL) of the figure expected for this "
         "platform.",
         "Communication takes that much longer in every step: the job runs slower than the node should allow.",
         "Compare the transports NCCL chose (NCCL_DEBUG=INFO) with `nvidia-smi topo -m`, look for inactive links "
         "and the fabric manager, unset NCCL_* variables that restrict transports, check for other GPU processes; "
         "pass --expect-busbw if the figure is right for your hardware.", kind=Kind.COST),
    Code("NCCL_P2P_BROKEN",
         "All-reduce with GPU peer-to-peer fails or returns wrong values, while NCCL_P2P_DISABLE=1 works (WARN "
         "when the job's environment already sets it).",
         "With default settings the job hangs or trains on corrupt gradients; the workaround costs bandwidth.",
         "Disable PCIe ACS (BIOS or setpci) or boot with iommu=pt, or ask the provider; until then run the job with "
         "NCCL_P2P_DISABLE=1 at the measured cost.", kind=Kind.BLOCKER),
    Code("NCCL_P2P_DISABLED_FAILS",
         "All-reduce works with P2P but fails with NCCL_P2P_DISABLE=1.",
         "The usual workaround for P2P trouble would break this node: NCCL's shared-memory path is broken.",
         "Do not set NCCL_P2P_DISABLE=1 here; check /dev/shm (`df -h /dev/shm`, at least 1 GiB; `--ipc=host` or "
         "`--shm-size` in Docker) and that NCCL_SHM_DISABLE is not set.", kind=Kind.BLOCKER),
    Code("NCCL_P2P_SLOWER_THAN_SHM",
         "All-reduce is clearly faster (15% or more) with GPU peer-to-peer disabled than with it.",
         "P2P is routed badly (ACS or the IOMMU send it through the root complex); the job runs slower by default.",
         "Run the job with NCCL_P2P_DISABLE=1, or fix ACS/IOMMU (see NCCL_P2P_BROKEN) to get P2P speed back.",
         kind=Kind.COST),
    Code("NCCL_ENV_COSTS_SPEED",
         "The job's environment sets NCCL_* variables that restrict transports, algorithms, channels or topology "
         "(measured slower, or not measured).",
         "Settings copied from an old fix (NCCL_P2P_DISABLE, NCCL_ALGO, a stale NCCL_TOPO_FILE) make every "
         "all-reduce slower than the hardware allows.",
         "Unless set on purpose for this host, unset them and delete them where they come from (~/.bashrc, "
         "/etc/environment, the Dockerfile, the job script).", kind=Kind.COST),
)
