"""One self-contained HTML page: headings, paragraphs, tables and embedded PNG images.

    >>> page = Page("demo")
    >>> page.table("t", ["a", "b"], [["1", "2"]])
    >>> "<td>1</td>" in page.render()
    True

Everything is escaped; images are ``data:image/png;base64`` URIs, so the file needs nothing else to display.
Writes are atomic (a temporary file, then ``os.replace``).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from trnsim.fileio import write_atomic

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
caption { caption-side: top; text-align: left; font-weight: bold; padding: 0.3em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
p.note { font-size: 0.85em; color: #555; white-space: pre-wrap; }
img { max-width: 100%; display: block; margin: 1em 0; }
"""


class Page:
    """An HTML document built in order."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.parts: list[str] = [f"<h1>{html.escape(title)}</h1>"]

    def heading(self, text: str, anchor: str | None = None) -> None:
        ident = f' id="{html.escape(anchor)}"' if anchor else ""
        self.parts.append(f"<h2{ident}>{html.escape(text)}</h2>")

    def paragraph(self, text: str, *, note: bool = False) -> None:
        cls = ' class="note"' if note else ""
        self.parts.append(f"<p{cls}>{html.escape(text)}</p>")

    def items(self, lines: Sequence[str]) -> None:
        self.parts.append("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>")

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[object]],
              caption: str | None = None) -> None:
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
        self.parts.append(f"<table><caption>{html.escape(title)}</caption><thead><tr>{head}</tr></thead>"
                          f"<tbody>{body}</tbody></table>")
        if caption:
            self.paragraph(caption, note=True)

    def image(self, png: bytes, alt: str) -> None:
        data = base64.b64encode(png).decode("ascii")
        self.parts.append(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">')

    def render(self) -> str:
        return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(self.title)}'
                f"</title><style>{STYLE}</style></head><body>\n" + "\n".join(self.parts) + "\n</body></html>\n")

    def write(self, path: Path) -> None:
        write_atomic(path, self.render().encode("utf-8"))


