"""The README's 30-second example runs as printed (a newcomer's first contact must stay true)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _first_python_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python example"
    return blocks[0]


@pytest.mark.slow
def test_thirty_second_example_runs_as_printed(tmp_path):
    script = tmp_path / "example.py"
    # The block's last lines are notebook-style expressions: print what they evaluate to.
    script.write_text(_first_python_block() + "\nprint('summary', prof.summary['total_time'] > 0)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          cwd=README.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "summary True" in done.stdout
