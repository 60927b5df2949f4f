"""The beat file and the watch that reads it while a rehearsal runs, in-process: a rank's side written
with the bootstrap's own Beat class, preflight's side with BeatWatch, as a launch would use them."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from preflight.rehearse import beat as beats
from preflight.rehearse.watch import BeatWatch, block_spread, capacity_for


def _rank(run_dir: Path, rank: int = 0, *, target: int = 6, capacity: int = 200) -> beats.Beat:
    beat, problem = beats.Beat.attach(run_dir / beats.beat_name(rank), capacity=capacity, target=target,
                                      launched=time.monotonic())
    assert problem is None and beat.shared
    beat.ints[beats.PID] = os.getpid()
    beat.floats[beats.HEARTBEAT] = time.monotonic()
    return beat


def _step(beat: beats.Beat, when: float) -> None:
    index = int(beat.ints[beats.COUNT])
    beat.times[index] = when
    beat.ints[beats.COUNT] = index + 1
    beat.floats[beats.LAST_STEP] = when


def test_a_beat_file_round_trips_counts_times_and_the_newest_whole_record(tmp_path: Path) -> None:
    fd = beats.create(tmp_path / "rank0.beat", capacity=50, target=6, launched=1.0)
    beat = _rank(tmp_path, capacity=50)
    for i in range(3):
        _step(beat, 10.0 + i)
    assert beat.write_record({"rank": 0, "n": 1}) and beat.write_record({"rank": 0, "n": 2})
    view = beats.parse(beats.read_bytes(fd))
    assert view is not None and view.count == 3 and view.step_starts == (10.0, 11.0, 12.0)
    assert view.record == {"rank": 0, "n": 2} and view.stop_at == 6 and view.launched == 1.0
    # a write cut short in the newer slot (its bytes changed, its checksum not): the older record is read
    data = bytearray(beats.read_bytes(fd))
    newer = beats.TIMES_AT + 8 * 50  # slot 0 holds the record of sequence 2
    data[newer + beats.SLOT_HEADER.size] ^= 0xFF
    torn = beats.parse(bytes(data))
    assert torn is not None and torn.record == {"rank": 0, "n": 1}
    assert beats.parse(b"not a beat file") is None
    os.close(fd)


def test_a_record_too_big_for_its_slot_is_shortened_not_lost(tmp_path: Path) -> None:
    beat = _rank(tmp_path)
    huge = {"rank": 0, "stack": [{"file": "x" * 1000}] * 400, "error": {"traceback": "t" * 300_000}}
    assert beat.write_record(huge)
    view = beats.read_path(tmp_path / "rank0.beat")
    assert view is not None and view.record is not None and view.record["rank"] == 0
    assert len(view.record["stack"]) == 5


def test_without_a_usable_file_the_rank_counts_in_memory_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "rank0.beat").write_text("someone else's file")
    beat, problem = beats.Beat.attach(tmp_path / "rank0.beat", capacity=20, target=6, launched=0.0)
    assert not beat.shared and problem is not None and "not a beat file" in problem
    _step(beat, 1.0)
    assert int(beat.ints[beats.COUNT]) == 1 and int(beat.ints[beats.STOP_AT]) == 6


def test_the_spread_of_a_steady_window_is_small_and_of_a_noisy_one_large() -> None:
    steady = [i * 0.01 for i in range(200)]
    spread = block_spread(steady, 5)
    assert spread is not None and spread.rate == pytest.approx(100.0) and spread.relative < 1e-6
    noisy = [0.0]
    for i in range(1, 200):
        noisy.append(noisy[-1] + (0.01 if (i // 30) % 2 else 0.03))
    noisy_spread = block_spread(noisy, 5)
    assert noisy_spread is not None and noisy_spread.relative > 0.1
    assert block_spread(steady[:10], 5) is None  # too few steps for six blocks of two


def _watch(tmp_path: Path, nproc: int, **extra: float) -> BeatWatch:
    watch = BeatWatch(label="rehearse 2 ranks", warmup=2, steps=10, stall_s=extra.pop("stall_s", 8.0),
                      launched=time.monotonic(), deadline_s=extra.pop("deadline_s", 300.0),
                      capacity=capacity_for(2, 10), measure_for_s=extra.pop("measure_for_s", 20.0))
    watch.prepare(tmp_path, nproc)
    return watch


def test_the_window_is_decided_while_the_ranks_run_and_only_well_ahead_of_them(tmp_path: Path) -> None:
    watch = _watch(tmp_path, 2)
    ranks = [_rank(tmp_path, r, target=12, capacity=watch.capacity) for r in (0, 1)]
    assert all(int(b.ints[beats.STOP_AT]) == watch.undecided for b in ranks)  # undecided until steps are seen
    now = time.monotonic()
    for i in range(8):  # 10 ms steps
        for beat in ranks:
            _step(beat, now - 0.08 + i * 0.01)
    assert watch.poll(now) is None
    assert watch.decided and 2 + 300 <= watch.stop_at <= 2 + 302  # 3 s of 10 ms steps (float rounding aside)
    assert all(int(b.ints[beats.STOP_AT]) == watch.stop_at for b in ranks)
    assert watch.status(2, now).phase == "measuring"


def test_a_stop_some_rank_is_too_close_to_is_left_alone(tmp_path: Path) -> None:
    watch = _watch(tmp_path, 1)
    beat = _rank(tmp_path, target=12, capacity=watch.capacity)
    beat.ints[beats.STOP_AT] = watch.stop_at = 40
    watch.decided = True
    now = time.monotonic()
    for i in range(39):  # at step 39 of 40: nothing may move the stop any more
        _step(beat, now - 0.39 + i * 0.01)
    watch.poll(now)
    assert int(beat.ints[beats.STOP_AT]) == 40


def test_a_rank_whose_watchdog_went_silent_ends_the_launch_as_frozen(tmp_path: Path) -> None:
    watch = _watch(tmp_path, 2, stall_s=5.0)
    waiting, frozen = (_rank(tmp_path, r, capacity=watch.capacity) for r in (0, 1))
    now = time.monotonic()
    for beat in (waiting, frozen):
        _step(beat, now - 20.0)
    waiting.floats[beats.HEARTBEAT] = now
    frozen.floats[beats.HEARTBEAT] = now - 12.0  # this process is alive: its "rank" froze 12 s ago
    reason = watch.poll(now)
    assert reason is not None and reason.startswith("rank 1's watchdog was silent for 12 s after step 1")
    assert [f.rank for f in watch.frozen] == [1] and watch.frozen[0].state in ("R", "S")
    status = watch.status(2, now)
    assert status.phase == "waiting for rank 1's step 2" and status.label == "hung if none by 5 s"


def test_the_records_are_built_from_the_header_and_kept_when_the_file_cannot_be_written(tmp_path: Path) -> None:
    watch = _watch(tmp_path, 1)
    beat = _rank(tmp_path, capacity=watch.capacity)
    for i in range(4):
        _step(beat, watch.launched + 1.0 + i)
    beat.write_record({"rank": 0, "steps": 1, "ended": "running", "notes": []})  # a second-old copy
    beat.ints[beats.ENDED] = beats.ENDINGS.index("steps_done")
    os.chmod(tmp_path, 0o500)  # the record file cannot be made (a full disk refuses it the same way)
    try:
        watch.finish(tmp_path)
    finally:
        os.chmod(tmp_path, 0o700)
    record = watch.records[0]
    assert record["steps"] == 4 and record["ended"] == "steps_done"
    assert record["step_starts_s"] == [1.0, 2.0, 3.0, 4.0]
    if os.geteuid() != 0:  # root writes through the mode
        assert not (tmp_path / "rank0.rehearsal.json").exists() and "could not be written" in watch.problems[0]


def test_a_rank_that_never_opened_its_file_has_no_record(tmp_path: Path) -> None:
    watch = _watch(tmp_path, 2)
    _rank(tmp_path, 0, capacity=watch.capacity)
    watch.finish(tmp_path)
    assert set(watch.records) == {0}
    assert not list(tmp_path.glob("*.beat"))  # the beat files are preflight's own: gone with the launch


def test_the_live_line_says_what_the_launch_waits_for(tmp_path: Path) -> None:
    watch = _watch(tmp_path, 2)
    now = time.monotonic()
    assert watch.status(2, now).phase == "start-up"
    ranks = [_rank(tmp_path, r, capacity=watch.capacity) for r in (0, 1)]
    assert watch.status(2, now).phase == "before the first optimizer step"
    for beat in ranks:
        _step(beat, now - 30.0)
    _step(ranks[0], now - 0.1)
    status = watch.status(2, now)
    assert status.phase == "waiting for rank 1's step 2" and status.phase_budget_s == 8.0
    assert status.label == "hung if none by 8 s" and status.phase_elapsed_s == pytest.approx(30.0, abs=0.5)
    assert struct.calcsize("<d") == 8


def test_a_rank_that_ended_by_itself_does_not_keep_the_others_undecided(tmp_path: Path) -> None:
    watch = _watch(tmp_path, 2)
    trainer, idle = (_rank(tmp_path, r, target=12, capacity=watch.capacity) for r in (0, 1))
    idle.ints[beats.ENDED] = beats.ENDINGS.index("returned")  # rank 1 returned at once, without a step
    now = time.monotonic()
    for i in range(8):
        _step(trainer, now - 0.08 + i * 0.01)
    watch.poll(now)
    assert watch.decided and int(trainer.ints[beats.STOP_AT]) == watch.stop_at < watch.undecided


def test_when_one_rank_cannot_have_preflights_file_every_rank_keeps_the_plans_window(tmp_path: Path) -> None:
    (tmp_path / beats.beat_name(1)).mkdir()  # rank 1's file cannot be made (a full disk fails the same way)
    watch = _watch(tmp_path, 2)
    assert watch.fixed and "rank 1's beat file could not be made" in watch.problems[0]
    beat = _rank(tmp_path, 0, target=12, capacity=watch.capacity)
    assert int(beat.ints[beats.STOP_AT]) == 12  # where rank 1, counting in a file of its own, stops too
    now = time.monotonic()
    for i in range(8):
        _step(beat, now - 0.08 + i * 0.01)
    watch.poll(now)
    assert int(beat.ints[beats.STOP_AT]) == 12


def test_the_rank_logs_and_the_reports_share_one_privacy_rule() -> None:
    """workers/rank_log.py is loaded by path in the job's interpreter, so it cannot import the report
    writer's constants: they are kept equal here."""
    from preflight.report import writer
    from preflight.workers import rank_log

    assert (rank_log.PRIVATE_FILE_MODE, rank_log.PRIVATE_DIR_MODE) == (writer.PRIVATE_FILE_MODE,
                                                                       writer.PRIVATE_DIR_MODE) == (0o600, 0o700)
