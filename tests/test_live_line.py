"""The live line: never a silent screen for more than a couple of seconds, on a terminal or in a log."""

from __future__ import annotations

import io
import threading
import time

from preflight import waits
from preflight.launch.plan import LaunchPlan, Phase
from preflight.launch.torchrun import LaunchStatus, RankProgress, launch_status
from preflight.report.live import LOG_EVERY_S, PLAIN_AFTER_S, SHOW_AFTER_S, LiveLine, clock, wait_text


def _line(tty: bool, launch: LaunchStatus | None = None) -> tuple[LiveLine, io.StringIO]:
    out = io.StringIO()
    live = LiveLine(out, tty=tty, width=100, lock=threading.Lock(), launch=lambda: launch)
    live.clear()  # as if a line had just been printed: the silence starts now
    out.seek(0)
    out.truncate()
    return live, out


def _status() -> LaunchStatus:
    plan = LaunchPlan("rehearsal", (Phase("ddp", "preflight.workers.ddp:run", budget_s=60.0),), nproc=2)
    marks = [RankProgress("ddp", "forward", 3, 1001.0, 1000.0, (), False)] * 2
    return launch_status(plan, marks, 1005.0, 990.0, deadline_s=280.0)


def test_a_wait_is_shown_after_a_second_of_silence_with_its_deadline_as_a_clock_time() -> None:
    live, out = _line(tty=True)
    now = time.monotonic()
    with waits.waiting("the job's torch", until=now + 90):
        live.tick(now + SHOW_AFTER_S / 2)
        assert out.getvalue() == ""  # a short wait stays silent
        live.tick(now + SHOW_AFTER_S + 1.2)
    drawn = out.getvalue()
    assert drawn.startswith("\r  > waiting for the job's torch: 2 s, until ") and drawn.endswith(" at the latest")
    assert clock(now + 90, now + SHOW_AFTER_S + 1.2) in drawn and "\n" not in drawn


def test_on_a_terminal_the_line_is_redrawn_in_place_and_cleared_before_other_output() -> None:
    live, out = _line(tty=True)
    now = time.monotonic()
    live.busy("IOMMU and PCIe ACS state")
    live.tick(now + 3)
    live.tick(now + 4)
    assert out.getvalue().count("\r") == 2 and "\n" not in out.getvalue()
    with live.lock:
        live.clear()
    assert out.getvalue().endswith("\r" + " " * len("  > IOMMU and PCIe ACS state: 4 s") + "\r")


def test_in_a_log_a_wait_is_one_plain_line_then_one_every_half_minute() -> None:
    live, out = _line(tty=False)
    now = time.monotonic()
    with waits.waiting("DeepSpeed's op build", until=now + 600):
        live.tick(now + SHOW_AFTER_S + 0.1)
        assert out.getvalue() == ""  # a log hears of a wait only after PLAIN_AFTER_S
        for second in range(int(PLAIN_AFTER_S), int(LOG_EVERY_S * 2 + PLAIN_AFTER_S) + 1):
            live.tick(now + second)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all(line.startswith("  > waiting for DeepSpeed's op build: ") for line in lines)
    assert "\r" not in out.getvalue()


def test_a_launch_a_distributed_check_waits_on_comes_before_any_other_wait() -> None:
    live, out = _line(tty=False, launch=_status())
    live.busy("One DDP step on every rank", watch_launch=True)
    now = time.monotonic()
    with waits.waiting("the job's torch"):
        for second in range(3, 70):
            live.tick(now + second)
    assert out.getvalue().splitlines() == ["  > rehearsal: ddp (2 ranks, budget 60 s) at 15 s"]  # once per phase


def test_nested_waits_show_the_innermost() -> None:
    with waits.waiting("NVML (the GPU walk)"), waits.waiting("the job's torch"):
        found = waits.current()
        assert found is not None and found.what == "the job's torch"
        assert wait_text(found, found.started + 3, 80) == "  > waiting for the job's torch: 3 s"
    assert waits.current() is None
