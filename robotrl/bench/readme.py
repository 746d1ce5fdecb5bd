"""Write a generated block into README.md between ``<!-- robotrl-bench:<tier>:begin/end -->``.

Only the text between the two markers changes; the markers are created at the end of the
``## Results`` section when missing (a ``## Results`` section is appended when there is
none). The file is replaced atomically (temporary sibling, then ``os.replace``), and
writing the same block twice gives the same file.
"""

from __future__ import annotations

import re
from pathlib import Path

from robotrl.files import atomic_write


def markers(tier: str) -> tuple[str, str]:
    """The begin and end marker lines of a tier's block."""
    return f"<!-- robotrl-bench:{tier}:begin -->", f"<!-- robotrl-bench:{tier}:end -->"


def replace_block(text: str, tier: str, body: str) -> str:
    """``text`` with the tier's block set to ``body`` (markers added under ``## Results`` if absent).

    Raises:
        ValueError: only one of the two markers is present, or they are out of order.
    """
    begin, end = markers(tier)
    block = f"{begin}\n{body.strip()}\n{end}"
    b, e = text.find(begin), text.find(end)
    if b >= 0 and e > b:
        return text[:b] + block + text[e + len(end):]
    if b >= 0 or e >= 0:
        raise ValueError(f"README has only one of the markers {begin} / {end}, or they are out of order; "
                         "fix or remove them by hand")
    m = re.search(r"^## Results[ \t]*$", text, flags=re.M)
    if m is None:
        return text.rstrip("\n") + f"\n\n## Results\n\n{block}\n"
    nxt = re.search(r"^## (?!#)", text[m.end():], flags=re.M)
    cut = m.end() + nxt.start() if nxt else len(text)
    head, tail = text[:cut].rstrip("\n"), text[cut:]
    return f"{head}\n\n{block}\n" + (f"\n{tail}" if tail else "")


def update_readme(path: str | Path, tier: str, body: str) -> Path:
    """Set the tier's block of the README at ``path`` to ``body``, atomically; returns the path."""
    path = Path(path)
    text = path.read_text()
    new = replace_block(text, tier, body)
    if new != text:
        atomic_write(path, new, mode=0o666)
    return path
