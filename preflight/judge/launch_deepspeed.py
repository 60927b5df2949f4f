"""The ``deepspeed`` runner's launch, judged as DeepSpeed 0.19.8's ``deepspeed/launcher/runner.py`` ``main`` runs it.

In its order:

1. ``fetch_hostfile(--hostfile)`` (default ``/job/hostfile``): a missing file is only a warning
   ("Unable to find hostfile, will proceed with training with local resources only"); a present one
   is parsed with ``^(\\S+)\\s+slots=(\\d+)`` per line (``#`` comments and blank lines skipped): a
   line that does not match, a host listed twice, or no host at all is a ``ValueError``;
2. without a hostfile, a set ``CUDA_VISIBLE_DEVICES`` becomes ``--include localhost:<value>`` when
   no filter or count is given, and is deleted (ignored) when one is;
3. ``--num_nodes``/``--num_gpus`` (any value >= 0) with ``--include``/``--exclude``: ``ValueError``;
4. without a hostfile the pool is ``localhost`` with ``device_count()`` slots, and ``--num_nodes``
   above 1 raises "Num nodes is >1 but no extra nodes available via hostfile";
5. ``parse_resource_filter`` applies ``--include``/``--exclude`` (``NAME[:SLOT,...][@...]``; an
   unknown host or slot is a ``ValueError``); with a hostfile the runner then checks ssh to its
   first host;
6. ``apply_num_nodes_and_gpus`` keeps the first ``--num_nodes`` hosts and slots ``0..--num_gpus-1``
   on each, unchecked against the hosts' GPUs; more than one host left is a multi-node launch over
   ssh, one host a local launch of its slots (the hostfile's host name is not compared with this one).
"""

from __future__ import annotations

import re
from collections import OrderedDict

from preflight.judge.findings import Finding, note, problem
from preflight.outcome import Status
from preflight.parse.launch_command import LaunchCommand
from preflight.probe.job_plan import HostfileFacts

VISIBLE = "CUDA_VISIBLE_DEVICES"
HOSTFILE_LINE = re.compile(r"^(\S+)\s+slots=(\d+)")


def parse_hostfile(text: str) -> tuple[OrderedDict[str, int], str | None]:
    """``_parse_hostfile``: the hosts and their slots, or the error DeepSpeed raises."""
    pool: OrderedDict[str, int] = OrderedDict()
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or line == "":
            continue
        match = HOSTFILE_LINE.search(line)
        if not match:
            return pool, f"Hostfile contains a bad entry: {line}, unable to proceed with launching"
        host = match.group(1)
        if host in pool:
            return pool, f"Hostfile contains multiple entries for {host}, unable to proceed with launching"
        pool[host] = int(match.group(2))
    if not pool:
        return pool, "Hostfile is empty or not formatted correctly, unable to proceed with launching."
    return pool, None


def _count(value: str | bool | None) -> int:
    """An integer option as argparse reads it (default -1)."""
    try:
        return int(str(value)) if value is not None else -1
    except ValueError:
        return -1


def deepspeed_slots(command: LaunchCommand, node_gpus: int, visible: int, mask: str | None,
                    hostfile: HostfileFacts | None, findings: list[Finding]) -> list[int] | None:
    """The runner's checks in its order; this node's GPU slots, None when it refuses, runs elsewhere or cannot tell."""
    include, exclude = str(command.option("include") or ""), str(command.option("exclude") or "")
    gpus_raw, nodes_raw = command.option("num_gpus"), command.option("num_nodes")
    gpus, nodes = _count(gpus_raw), _count(nodes_raw)
    if gpus_raw is not None and not str(gpus_raw).lstrip("-").isdigit():
        findings.append(problem(Status.FAIL, "LAUNCH_DS_NUM_GPUS", "--num_gpus", f"{gpus_raw!r} is not a number: "
                                "the runner's argparse refuses it", "Use --num_gpus N."))
        return None
    pool: OrderedDict[str, int] | None = None
    if hostfile is not None and hostfile.exists:
        if hostfile.text is None:
            findings.append(problem(Status.FAIL, "LAUNCH_DS_HOSTFILE_INVALID", "--hostfile",
                                    f"{hostfile.path} {hostfile.problem or 'cannot be read'}: the runner stops",
                                    "Make the hostfile a readable text file of `host slots=N` lines."))
            return None
        pool, error = parse_hostfile(hostfile.text)
        if error is not None:
            findings.append(problem(Status.FAIL, "LAUNCH_DS_HOSTFILE_INVALID", "--hostfile",
                                    f"{hostfile.path}: DeepSpeed raises '{error}'",
                                    "Write one `hostname slots=N` line per node (N = its GPUs), each host once."))
            return None
    elif hostfile is not None and hostfile.given and nodes <= 1:
        findings.append(problem(Status.WARN, "LAUNCH_DS_HOSTFILE_MISSING", "--hostfile",
                                f"{hostfile.path} does not exist: DeepSpeed warns 'Unable to find hostfile' and runs "
                                "on this node only", "Give the path of the hostfile that lists the job's nodes, or "
                                "drop --hostfile for a one-node job."))
    if include and exclude:
        findings.append(problem(Status.FAIL, "LAUNCH_DS_FILTER_CONFLICT", "--include",
                                "--include and --exclude together: DeepSpeed raises 'include_str and exclude_str are "
                                "mutually exclusive'", "Keep one of them."))
        return None
    if pool is None and mask is not None:
        if include or exclude or nodes > 1 or gpus > 0:
            findings.append(problem(Status.WARN, "LAUNCH_DS_IGNORES_VISIBLE", VISIBLE,
                                    f"{VISIBLE}={mask} is ignored (and removed) by DeepSpeed's runner because "
                                    "--include/--exclude/--num_gpus/--num_nodes is given: slots count physical GPUs",
                                    f"Drop {VISIBLE} and name the GPUs with --include localhost:0,1, or drop the "
                                    "filter."))
        else:
            include = f"localhost:{mask}"
    if (nodes >= 0 or gpus >= 0) and (command.option("include") or command.option("exclude")):
        findings.append(problem(Status.FAIL, "LAUNCH_DS_FILTER_CONFLICT", "--num_gpus",
                                "--num_gpus/--num_nodes with --include/--exclude: DeepSpeed raises 'Cannot specify "
                                "num_nodes/gpus with include/exclude'", "Keep either the filter or the counts."))
        return None
    if pool is None:
        if not node_gpus:
            findings.append(note("LAUNCH_DS_CPU", "deepspeed",
                                 "no GPU: DeepSpeed's CPU accelerator starts one rank per NUMA node (LOCAL_SIZE if "
                                 "set)"))
            return None
        if nodes > 1:
            where = f" ({hostfile.path} does not exist)" if hostfile is not None and hostfile.given else ""
            findings.append(problem(Status.FAIL, "LAUNCH_DS_NO_HOSTFILE", "--num_nodes",
                                    f"{nodes} nodes and no hostfile{where}: DeepSpeed raises 'Num nodes is >1 but no "
                                    "extra nodes available via hostfile' and the job never starts",
                                    "Give --hostfile with one `host slots=N` line per node, or use --num_nodes 1 "
                                    "(or drop it) on one node."))
            return None
        pool = OrderedDict(localhost=node_gpus)
        from_hostfile = False
    else:
        from_hostfile = True
    active = _filter(include or exclude, pool, bool(include), "--include" if command.option("include") else
                     "--exclude" if exclude else VISIBLE, from_hostfile, findings) if (include or exclude) else \
        OrderedDict((host, list(range(slots))) for host, slots in pool.items())
    if active is None:
        return None
    if nodes > 0:
        kept = OrderedDict(list(active.items())[:nodes])
        if from_hostfile and len(kept) < nodes:
            findings.append(problem(Status.WARN, "LAUNCH_DS_FEWER_NODES", "--num_nodes",
                                    f"--num_nodes {nodes} but the hostfile lists {len(kept)} host"
                                    f"{'s' if len(kept) != 1 else ''} ({', '.join(kept)}): DeepSpeed runs on "
                                    f"{len(kept)} without a word, not {nodes}",
                                    f"List all {nodes} nodes in the hostfile, or set --num_nodes {len(kept)}."))
        active = kept
    if gpus > 0:
        if from_hostfile or len(active) > 1:
            active = OrderedDict((host, list(range(gpus))) for host in active)
        elif gpus > node_gpus:
            findings.append(problem(Status.FAIL, "LAUNCH_DS_NUM_GPUS", "--num_gpus",
                                    f"{gpus} GPUs asked, the node has {node_gpus}: DeepSpeed launches ranks on "
                                    f"slots 0..{gpus - 1} unchecked and the extra ranks fail at set_device",
                                    f"Use --num_gpus {node_gpus} or fewer."))
            return None
        else:
            active = OrderedDict((host, list(range(gpus))) for host in active)
    if len(active) > 1 or command.option("force_multi"):
        findings.append(note("LAUNCH_DS_HOSTFILE", "--hostfile",
                             f"a multi-node launch over ssh on {len(active)} hosts ({', '.join(list(active)[:4])}"
                             f"{', ...' if len(active) > 4 else ''}); preflight judges this node only"))
        return None
    slots = next(iter(active.values()), [])
    if from_hostfile and slots and max(slots) >= node_gpus:
        findings.append(problem(Status.FAIL, "LAUNCH_DS_HOSTFILE_SLOTS", "--hostfile",
                                f"the hostfile gives {len(slots)} slots on one host, the node has {node_gpus} GPU"
                                f"{'s' if node_gpus != 1 else ''}: ranks {node_gpus}..{len(slots) - 1} fail at "
                                "set_device (invalid device ordinal)",
                                f"Set slots={node_gpus} in the hostfile (or --num_gpus {node_gpus})."))
        return None
    return slots


def _filter(text: str, pool: OrderedDict[str, int], including: bool, where: str, from_hostfile: bool,
            findings: list[Finding]) -> OrderedDict[str, list[int]] | None:
    """``parse_resource_filter`` on the pool: the hosts and slots left, None when DeepSpeed raises."""
    chosen: OrderedDict[str, list[int]] = OrderedDict()
    whole: set[str] = set()
    for spec in text.split("@"):
        host, sep, listed = spec.partition(":")
        if host not in pool:
            known = "the hostfile lists " + ", ".join(pool) if from_hostfile else \
                "without a hostfile DeepSpeed knows only 'localhost'"
            findings.append(problem(Status.FAIL, "LAUNCH_DS_FILTER_HOST", where,
                                    f"host {host!r}: {known}, and raises \"Hostname '{host}' not found in hostfile\"",
                                    "Name hosts of the hostfile (localhost without one)."))
            return None
        slots = list(range(pool[host]))
        if not sep:
            chosen[host] = slots
            whole.add(host)
            continue
        picked: list[int] = []
        for item in listed.split(","):
            if not item.strip().isdigit():
                message = (f"{VISIBLE} entry {item!r} is not a GPU index: DeepSpeed turns {VISIBLE} into "
                           "--include localhost:<value> and fails in int()" if where == VISIBLE
                           else f"slot {item!r} is not a number (DeepSpeed's int() fails)")
                findings.append(problem(Status.FAIL, "LAUNCH_DS_FILTER_SLOT", where, message,
                                        f"Use GPU indices (nvidia-smi -L) in {where}, not UUIDs."))
                return None
            slot = int(item)
            if slot not in slots:
                findings.append(problem(Status.FAIL, "LAUNCH_DS_FILTER_SLOT", where,
                                        f"slot {slot}: {host} has slots 0..{len(slots) - 1}; DeepSpeed raises "
                                        f"\"No slot '{slot}' specified on host '{host}'\"",
                                        f"Use slots between 0 and {len(slots) - 1}."))
                return None
            picked.append(slot)
        chosen[host] = sorted(set(picked))
    if including:
        return chosen
    left: OrderedDict[str, list[int]] = OrderedDict()
    for host, count in pool.items():
        kept = [] if host in whole else [slot for slot in range(count) if slot not in set(chosen.get(host, []))]
        if kept:
            left[host] = kept
    return left
