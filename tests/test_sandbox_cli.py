"""``evolora sandbox FILE.py``: one JSON object per run, exit 0 whatever the program did."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from evolora.cli import app

runner = CliRunner()


def sandbox(tmp_path, source: str | bytes, *options: str):
    program = tmp_path / "prog.py"
    program.write_bytes(source.encode() if isinstance(source, str) else source)
    result = runner.invoke(app, ["sandbox", str(program), *options])
    return result


@pytest.mark.parametrize(
    ("source", "options", "status", "output"),
    [
        ("print(6 * 7)", [], "ok", "42\n"),
        ("raise ValueError('bad value')", [], "error", ""),
        ("while True:\n    pass", ["--timeout", "0.5"], "timeout", ""),
        ("x = bytearray(10 ** 9)", ["--memory", "64"], "memory", ""),
        ("import os\nos.system('echo pwned')", [], "banned", ""),
        ("print('y' * 100_000)", [], "output_limit", "y" * 10_000),
        (b"print('\xff')", [], "error", ""),  # not UTF-8: the program's fault, not a usage error
    ],
)
def test_each_status_is_one_json_object_and_exit_zero(tmp_path, source, options, status, output):
    result = sandbox(tmp_path, source, *options)
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert set(record) == {"status", "output", "seconds", "error"}
    assert record["status"] == status, record
    assert record["output"] == output
    assert isinstance(record["seconds"], float) and record["seconds"] >= 0
    if status == "error":
        assert record["error"]


def test_timeout_option_bounds_wall_time(tmp_path):
    record = json.loads(sandbox(tmp_path, "while True:\n    pass", "--timeout", "0.3").stdout)
    assert record["status"] == "timeout" and record["seconds"] < 1.5


@pytest.mark.parametrize(("value", "output"), [('"7\\n"', "7\n"), ('{"a": [1, 2]}', '{"a": [1, 2]}\n')])
def test_input_json_is_fed_to_stdin(tmp_path, value, output):
    record = json.loads(sandbox(tmp_path, "print(input())", "--input", value).stdout)
    assert record == {**record, "status": "ok", "output": output}


def test_input_is_refused_without_the_option(tmp_path):
    assert json.loads(sandbox(tmp_path, "print(input())").stdout)["status"] == "banned"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--input", "{not json"], "--input is not valid JSON"),
        (["--timeout", "0"], "--timeout must be > 0"),
        (["--memory", "8"], "--memory >= 32"),
    ],
)
def test_usage_errors_exit_2(tmp_path, options, message):
    result = sandbox(tmp_path, "print(1)", *options)
    assert result.exit_code == 2
    assert message in result.output


def test_missing_file_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["sandbox", str(tmp_path / "missing.py")])
    assert result.exit_code == 2
    assert "missing.py" in result.output


def test_installed_command_in_a_subprocess(tmp_path):
    program = tmp_path / "p.py"
    program.write_text("import math\nprint(math.factorial(5))")
    done = subprocess.run(
        [sys.executable, "-c", "from evolora.cli import app; app()", "sandbox", str(program)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"] == "120\n"
