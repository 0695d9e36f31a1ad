"""The README's Python snippets, as the tests run them.

Each ```python block of README.md is one snippet. A block indented by four
spaces continues the `with` block of the snippet before it (the README shows
it that way), so such blocks are joined onto their parent before running.
"""
from __future__ import annotations

import os
import re
import textwrap
from typing import List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")
_BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.M | re.S)


def snippets(path: str = README) -> List[str]:
    """The README's Python programs: continuation blocks joined to their parent."""
    with open(path) as f:
        text = f.read()
    programs: List[str] = []
    for m in _BLOCK.finditer(text):
        body = "\n".join(line[len(m.group(1)):] for line in m.group(2).splitlines()) + "\n"
        if body.startswith("    ") and programs:
            programs[-1] += body
        else:
            programs.append(textwrap.dedent(body))
    return programs
