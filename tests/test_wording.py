"""The repository speaks of the product, never of how it was made: no "session N", "this session"
or "the session-10 host" in code, docs, configs, tests, benchmarks or result names. Technical uses
of the word (a process session, pytest's ``scope="session"``) are allowed, named one by one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORD = re.compile(r"session", re.IGNORECASE)
TECHNICAL = re.compile(
    r'scope="session"|start_new_session|--new-session|_session_members|own session|child\'s session'
    r"|session or process group|pgrp, session|process session|sessions? \(process group\)"
)
"""Lines where "session" means a POSIX process session or a pytest fixture scope."""

QUOTED_DATA = {"evolora/data/gsm_seeds.json"}
"""Files that quote a data set's text verbatim (GSM8K train problems), where the word is the problem's own."""


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / p for p in out.splitlines()]


def test_no_development_history_wording():
    found = []
    for path in _tracked():
        if WORD.search(path.name):
            found.append(f"{path.relative_to(ROOT)} (file name)")
        if (
            path.suffix in (".gz", ".png", ".safetensors")
            or not path.is_file()
            or path.relative_to(ROOT).as_posix() in QUOTED_DATA
        ):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if WORD.search(line) and not TECHNICAL.search(line) and path.name != "test_wording.py":
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not found, "development-history wording (key results by date, commit and hardware):\n" + "\n".join(found)


def test_the_guard_sees_history_and_spares_technical_uses():
    assert not TECHNICAL.search("measured in session 5 on the session-10 host")
    assert TECHNICAL.search('@pytest.fixture(scope="session")')
