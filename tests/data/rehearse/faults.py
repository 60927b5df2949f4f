"""A small training loop with the faults a hostile script or a broken machine brings to a rehearsal
(issue 25, items 6-8; issue 26, item 4), each behind an option, on ``--fault-rank`` at ``--at-step``:

- ``--os-exit CODE``: ``os._exit(CODE)`` in the loop (no exception, no atexit);
- ``--gil-hang``: ``ctypes.PyDLL(None).sleep(3600)``: libc's sleep called with the GIL held, so no
  other thread of the rank (its watchdog) runs again;
- ``--sigkill``: the rank sends itself SIGKILL, as the kernel's OOM killer would;
- ``--delete DIR``: ``shutil.rmtree(DIR)`` (a script cleaning up "its" reports directory);
- ``--fill-disk FILE``: writes FILE until the disk is full (ENOSPC), then trains on;
- ``--print-mb N``: prints N MB at the first step;
- ``--daemon``: rank 0 double-forks a ``setsid`` daemon (it keeps the environment) and starts a ``setsid``
  sleeper with an empty environment, both sleeping ``--daemon-for`` seconds (default 600, a test's own);
- ``--pool``: rank 0 starts a ``multiprocessing.Pool`` whose tasks ignore SIGTERM and never end;
- ``--idle-rank R``: rank R returns at once (with ``--no-ddp`` the others train alone);
- ``--needs-cuda``: ``torch.cuda.set_device(LOCAL_RANK)`` first, as scripts written for GPUs do;
- ``--say TEXT --exit-code C``: prints TEXT and exits with C before training, as a script that checks
  its GPUs itself does ("Unable to locate sufficient 2 gpus ...");
- ``--no-ddp``: each rank trains its own model, no collective at all.
"""

import argparse
import ctypes
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def _ignore_term_forever(_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(3600)


def _daemons(seconds):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(float(seconds))
        os._exit(0)
    subprocess.Popen(["setsid", "sleep", seconds], env={}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def _fill(path):
    block = b"x" * (1 << 20)
    with open(path, "wb") as handle:
        try:
            while True:
                handle.write(block)
                handle.flush()
        except OSError as exc:
            print(f"disk full: {exc}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault-rank", type=int, default=0)
    parser.add_argument("--at-step", type=int, default=3)
    parser.add_argument("--os-exit", type=int, default=None)
    parser.add_argument("--gil-hang", action="store_true")
    parser.add_argument("--sigkill", action="store_true")
    parser.add_argument("--delete", default=None)
    parser.add_argument("--fill-disk", default=None)
    parser.add_argument("--print-mb", type=int, default=0)
    parser.add_argument("--daemon", action="store_true")
    parser.add_argument("--daemon-for", default="600")
    parser.add_argument("--pool", action="store_true")
    parser.add_argument("--idle-rank", type=int, default=None)
    parser.add_argument("--needs-cuda", action="store_true")
    parser.add_argument("--say", default=None)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--no-ddp", action="store_true")
    parser.add_argument("--steps", type=int, default=0, help="0: train until stopped")
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    if args.needs_cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if args.say is not None:
        print(args.say, flush=True)
        sys.exit(args.exit_code)
    if args.idle_rank == rank:
        return
    if not args.no_ddp:
        dist.init_process_group("gloo")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    net = model if args.no_ddp else DDP(model)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    pool = None
    if rank == 0 and args.daemon:
        _daemons(args.daemon_for)
    if rank == 0 and args.pool:
        pool = multiprocessing.get_context("fork").Pool(2)
        for _ in range(4):
            pool.apply_async(_ignore_term_forever, (0,))
    step = 0
    while not args.steps or step < args.steps:
        optimizer.zero_grad()
        F.mse_loss(net(x), y).backward()
        optimizer.step()
        step += 1
        if step == 1 and args.print_mb and rank == args.fault_rank:
            chunk = ("y" * 1023 + "\n") * 1024  # 1 MB
            for _ in range(args.print_mb):
                sys.stdout.write(chunk)
            sys.stdout.flush()
        if rank != args.fault_rank or step != args.at_step:
            continue
        if args.os_exit is not None:
            os._exit(args.os_exit)
        if args.gil_hang:
            ctypes.PyDLL(None).sleep(3600)
        if args.sigkill:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.delete:
            shutil.rmtree(args.delete, ignore_errors=True)
        if args.fill_disk:
            _fill(args.fill_disk)
    if pool is not None:
        pool.terminate()


if __name__ == "__main__":
    main()
