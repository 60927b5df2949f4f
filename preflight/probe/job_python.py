"""Run one of preflight's own scripts in the job's interpreter, with the job's ``sys.path``.

A job's ranks keep ``PYTHONPATH`` and the user site (``~/.local``, or ``$PYTHONUSERBASE``): environment
modules and some containers reach torch only through ``PYTHONPATH``, ``pip install --user`` only
through the user site. ``python -I`` drops both, so a probe run that way can miss the torch the job
imports. Instead the script runs through ``python -c BOOT``: the interpreter builds ``sys.path`` as
for the job, then BOOT takes the working directory off it (``-c`` puts ``''`` first: a stray
``./numpy`` where preflight was started must not shadow the real one) and runs the script by path
(:func:`runpy.run_path` adds nothing to ``sys.path``, so the script's own folder, where
``preflight/probe/deepspeed.py`` would shadow the real package, stays off it too).
"""

from __future__ import annotations

from pathlib import Path

BOOT = ("import runpy, sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
        "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def script_argv(python: str, script: Path, *args: str) -> list[str]:
    """``python -c BOOT script args...``: ``script`` run as ``__main__`` with the job's ``sys.path``."""
    return [python, "-c", BOOT, str(script), *args]
