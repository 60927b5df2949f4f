"""Secrets in command lines (issue 25 item 4): the value after ``--password``, ``--hf_token``,
``--wandb_key``-style options, as one argument or two, in a list, a repr or a string; counted against
real launch lines from public repositories for false positives."""

from __future__ import annotations

import shlex

from preflight.report.redact import REDACTED, redact_argv, redact_command, redact_obj
from tests.conftest import REPO_ROOT

LINES = REPO_ROOT / "tests" / "data" / "redact" / "launch_lines.txt"


def test_by_name_in_both_forms_and_by_shape() -> None:
    args = ["train.py", "--password", "hunter2", "--hf_token=hf_abc", "--wandb_key", "0f0f", "--api-key", "k",
            "--lr", "0.1", "--token", "$HF_TOKEN", "--max_tokens", "512", "--tokenizer", "gpt2", "--push_to_hub",
            "--hub_token", "--output_dir", "out", "hf_" + "a1" * 18]
    assert redact_argv(args) == ["train.py", "--password", REDACTED, f"--hf_token={REDACTED}", "--wandb_key",
                                 REDACTED, "--api-key", REDACTED, "--lr", "0.1", "--token", "$HF_TOKEN",
                                 "--max_tokens", "512", "--tokenizer", "gpt2", "--push_to_hub", "--hub_token",
                                 "--output_dir", "out", f"hf_{REDACTED}"]


def test_reprs_lists_and_strings() -> None:
    text = "LaunchCommand(script_args=('--password', 'hunter2', '--lr', '1'))"
    assert redact_command(text) == f"LaunchCommand(script_args=('--password', '{REDACTED}', '--lr', '1'))"
    assert redact_command('["--hf_token", "abc", "--x", "y"]') == f'["--hf_token", "{REDACTED}", "--x", "y"]'
    assert redact_command("torchrun t.py --password hunter2 --secret-key=abc") == \
        f"torchrun t.py --password {REDACTED} --secret-key={REDACTED}"
    report = {"run": {"argv": ["preflight", "rehearse", "--", "t.py", "--password", "hunter2"],
                      "options": {"launch": "torchrun t.py --wandb_key 0f0f"}},
              "rehearsal": {"args": ["--hf_token", "abc"]}, "details": {"script_args": ["--token", "x", "--lr"]}}
    assert redact_obj(report) == {
        "run": {"argv": ["preflight", "rehearse", "--", "t.py", "--password", REDACTED],
                "options": {"launch": f"torchrun t.py --wandb_key {REDACTED}"}},
        "rehearsal": {"args": ["--hf_token", REDACTED]}, "details": {"script_args": ["--token", REDACTED, "--lr"]}}


def test_real_launch_lines_lose_only_their_secrets() -> None:
    """Every option of the collected lines keeps its value except the ones marked secret: 0 false positives
    among the 167 options of 14 real launch lines, and the one real secret (``--hub_token``) found."""
    options = found = 0
    for raw in LINES.read_text().splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        line, _, mark = raw.partition("#@ secret:")
        expected = set(mark.split())
        words = shlex.split(line)
        redacted = redact_argv(words)
        options += sum(word.startswith("-") for word in words)
        changed = {words[i - 1] for i, (a, b) in enumerate(zip(words, redacted, strict=True)) if a != b}
        assert changed == expected, line
        found += len(changed)
    assert options == 167 and found == 1
