"""The README's Python example runs as written."""

import pathlib
import re


def test_readme_python_blocks_run(capsys):
    readme = pathlib.Path(__file__).resolve().parents[1] / "README.md"
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, str(readme), "exec"), {})
    assert "epsilon: got nan" in capsys.readouterr().out
