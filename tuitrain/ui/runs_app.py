"""The table of `tuitrain runs` in a terminal: sort (`s` cycles the column), filter (`/`),
Enter opens `watch` on the highlighted run, space marks runs, `c` compares the marked ones
(2 to 8)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Input, Static

from tuitrain.runs import COLUMNS, RunRow, cells
from tuitrain.text import strip_controls
from tuitrain.ui.widgets.panel import esc

SORT_KEYS = {
    "run": lambda r: r.name,
    "status": lambda r: r.status,
    "preset": lambda r: r.preset or "",
    "steps": lambda r: r.steps or 0,
    "best": lambda r: r.best if r.best is not None else float("-inf"),
    "throughput": lambda r: r.tokens_per_s or r.samples_per_s or 0.0,
    "duration": lambda r: r.duration_s or 0.0,
    "started": lambda r: r.started or "",
}


class RunsApp(App[tuple[str, list[str]] | None]):
    """Returns ("watch", [dir]) or ("compare", [a, b]) for the command to open, or None."""

    CSS = """
    #filter { display: none; }
    #filter.-open { display: block; }
    #title { padding: 0 1; }
    DataTable { height: 1fr; }
    """
    AUTO_FOCUS = "DataTable"
    BINDINGS = [
        Binding("enter", "open", "Watch", priority=False),
        Binding("space", "mark", "Mark"),
        Binding("c", "compare", "Compare marked"),
        Binding("s", "sort", "Sort"),
        Binding("slash", "filter", "Filter"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, rows: Sequence[RunRow]) -> None:
        super().__init__()
        self.rows = list(rows)
        self.marked: set[str] = set()
        self.pattern = ""
        self.sort_column = -1  # newest first, as listed
        self.shown: list[RunRow] = []

    def compose(self) -> ComposeResult:
        yield Static("", id="title")
        yield Input(placeholder="text in any column", id="filter")
        yield DataTable(cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(" ", *COLUMNS)
        self.refill()

    def refill(self) -> None:
        rows = [r for r in self.rows if not self.pattern or self.pattern.lower() in
                " ".join(cells(r)).lower()]  # fmt: skip
        if self.sort_column >= 0:
            column = COLUMNS[self.sort_column]
            rows.sort(key=SORT_KEYS[column], reverse=column not in ("run", "status", "preset"))
        self.shown = rows
        table = self.query_one(DataTable)
        table.clear()
        for row in rows:
            mark = "●" if row.run_dir in self.marked else " "
            table.add_row(mark, *(Text(strip_controls(c)) for c in cells(row)), key=row.run_dir)
        sort = COLUMNS[self.sort_column] if self.sort_column >= 0 else "started (newest first)"
        self.query_one("#title", Static).update(
            f"[b]tuitrain runs[/b] · {len(rows)} of {len(self.rows)} · sorted by {sort}"
            + (f" · filter [b]{esc(self.pattern)}[/b]" if self.pattern else "")
            + f" · {len(self.marked)} marked · Enter watch, space mark, c compare, s sort, / filter"
        )

    def current(self) -> RunRow | None:
        table = self.query_one(DataTable)
        if not self.shown or table.cursor_row is None or table.cursor_row >= len(self.shown):
            return None
        return self.shown[table.cursor_row]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def action_open(self) -> None:
        row = self.current()
        if row is not None:
            self.exit(("watch", [row.run_dir]))

    def action_mark(self) -> None:
        row = self.current()
        if row is None:
            return
        self.marked ^= {row.run_dir}
        cursor = self.query_one(DataTable).cursor_row
        self.refill()
        self.query_one(DataTable).move_cursor(row=min(cursor + 1, len(self.shown) - 1))

    def action_compare(self) -> None:
        marked = [r.run_dir for r in self.rows if r.run_dir in self.marked]
        if not 2 <= len(marked) <= 8:
            self.notify(f"mark 2 to 8 runs with space to compare them ({len(marked)} marked)",
                        severity="warning")  # fmt: skip
            return
        self.exit(("compare", marked))

    def action_sort(self) -> None:
        self.sort_column = (self.sort_column + 1) % len(COLUMNS)
        self.refill()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-open")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.pattern = event.value.strip()
        event.input.remove_class("-open")
        self.query_one(DataTable).focus()
        self.refill()
