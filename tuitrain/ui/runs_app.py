"""The table of `tuitrain runs` in a terminal: sort (`s` cycles the column), filter (`/`),
Enter opens `watch` on the highlighted run, space marks runs, `c` compares the marked ones
(2 to 8).

The filter is literal text (any column, case-insensitive), applied on Enter. Keys cost what
they change, not the table's size: space updates one cell, `s` reorders the rows the table
holds, and rows are added again only when the filter changed which runs are shown; each
run's cells are made once (`bench/runs_keys.py`: 10,000 runs). Enter opens `watch` with the
paths after `--`: a run named `-h` is a run, not an option."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Footer, Input, Static

from tuitrain.core.text import strip_controls
from tuitrain.metrics.format import COLUMNS, cells
from tuitrain.metrics.runfile import RunSummary as RunRow
from tuitrain.ui.stopping import StoppingApp
from tuitrain.ui.widgets.panel import esc

MAX_FILTER = 200  # characters of filter text

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


class RunsApp(StoppingApp):
    """Returns ("watch", [dir]) or ("compare", [a, b]) for the command to open, or None."""

    CSS = """
    #filter { display: none; }
    #filter.-open { display: block; }
    #title { padding: 0 1; }
    DataTable { height: 1fr; }
    DataTable.-hidden { display: none; }
    """
    AUTO_FOCUS = "#all"
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
        # what to open once the table closes: ("watch" | "compare", run dirs); None after q
        # or a stop signal (SIGTERM, SIGINT, SIGHUP: `StoppingApp`, the other apps' handling)
        self.choice: tuple[str, list[str]] | None = None
        self.rows = list(rows)
        self.by_dir = {r.run_dir: r for r in self.rows}
        self.marked: set[str] = set()
        self.pattern = ""
        self.sort_column = -1  # newest first, as listed
        self.shown: list[RunRow] = []
        # Each row's cells, made once: (the cells as Text, its text for the filter).
        self._cells: dict[str, tuple[list[Text], str]] = {}
        self._name_cell: dict[int, str] = {}  # id of a row's name cell -> its run dir
        # What each table holds, in its order: "all" every run (filled once), "some" the
        # runs a filter keeps (filled when the filter changes what it keeps).
        self._order: dict[str, list[str]] = {"all": [], "some": []}

    def compose(self) -> ComposeResult:
        yield Static("", id="title")
        yield Input(placeholder="text in any column", id="filter", max_length=MAX_FILTER)
        yield DataTable(cursor_type="row", zebra_stripes=True, id="all")
        yield DataTable(cursor_type="row", zebra_stripes=True, id="some", classes="-hidden")
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()  # the stop signals, as every tuitrain app takes them
        for table in self.query(DataTable):
            table.add_column(" ", key="mark")
            for name in COLUMNS:
                table.add_column(name, key=name)
        self.refill()

    @property
    def table(self) -> DataTable[object]:
        """The table on screen: every run, or the runs the filter keeps."""
        return self.query_one("#some" if self.pattern else "#all", DataTable)

    def row_cells(self, row: RunRow) -> tuple[list[Text], str]:
        got = self._cells.get(row.run_dir)
        if got is None:
            texts = [strip_controls(c) for c in cells(row)]
            got = ([Text(t) for t in texts], " ".join(texts).lower())
            self._cells[row.run_dir] = got
            self._name_cell[id(got[0][0])] = row.run_dir
        return got

    def kept_rows(self) -> list[RunRow]:
        """The rows the filter keeps, in the sort's order."""
        pattern = self.pattern.lower()
        rows = [r for r in self.rows if not pattern or pattern in self.row_cells(r)[1]]
        if self.sort_column >= 0:
            column = COLUMNS[self.sort_column]
            rows.sort(key=SORT_KEYS[column], reverse=column not in ("run", "status", "preset"))
        return rows

    def refill(self) -> None:
        """Show what the filter keeps in the sort's order, touching no more than that needs.
        Rows are added to a table only when what it must hold changed: the table of every
        run is filled once; the filter's table when the filter keeps other runs (their
        cells are made once per run). A new order is a sort of the rows a table holds."""
        rows = self.kept_rows()
        name = "some" if self.pattern else "all"
        table = self.query_one(f"#{name}", DataTable)
        keys = [r.run_dir for r in rows]
        held = self._order[name]
        if set(keys) != set(held) or len(keys) != len(held):
            table.clear()
            for row in rows:
                mark = "●" if row.run_dir in self.marked else " "
                table.add_row(mark, *self.row_cells(row)[0], key=row.run_dir)
        elif keys != held:
            rank = {key: i for i, key in enumerate(keys)}
            names = self._name_cell
            table.sort("run", key=lambda cell: rank[names[id(cell)]])
        self._order[name] = keys
        for other in self.query(DataTable):
            other.set_class(other is not table, "-hidden")
        self.shown = rows
        self.show_title()

    def show_title(self) -> None:
        sort = COLUMNS[self.sort_column] if self.sort_column >= 0 else "started (newest first)"
        self.query_one("#title", Static).update(
            f"[b]tuitrain runs[/b] · {len(self.shown)} of {len(self.rows)} · sorted by {sort}"
            + (f" · filter [b]{esc(self.pattern)}[/b]" if self.pattern else "")
            + f" · {len(self.marked)} marked · Enter watch, space mark, c compare, s sort, / filter"
        )

    def current(self) -> RunRow | None:
        table = self.table
        if not self.shown or table.cursor_row is None or table.cursor_row >= table.row_count:
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        return self.by_dir.get(key or "")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def action_open(self) -> None:
        row = self.current()
        if row is not None:
            self.choice = ("watch", [row.run_dir])
            self.exit(0)

    def action_mark(self) -> None:
        row = self.current()
        if row is None:
            return
        self.marked ^= {row.run_dir}
        mark = "●" if row.run_dir in self.marked else " "
        for name, held in self._order.items():  # the other table holds it too, maybe
            if name == "all" or row.run_dir in held:
                self.query_one(f"#{name}", DataTable).update_cell(row.run_dir, "mark", mark)
        table = self.table
        table.move_cursor(row=min(table.cursor_row + 1, table.row_count - 1))
        self.show_title()

    def action_compare(self) -> None:
        marked = [r.run_dir for r in self.rows if r.run_dir in self.marked]
        if not 2 <= len(marked) <= 8:
            self.notify(f"mark 2 to 8 runs with space to compare them ({len(marked)} marked)",
                        severity="warning")  # fmt: skip
            return
        self.choice = ("compare", marked)
        self.exit(0)

    def action_sort(self) -> None:
        self.sort_column = (self.sort_column + 1) % len(COLUMNS)
        self.refill()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-open")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.pattern = event.value.strip()[:MAX_FILTER]
        event.input.remove_class("-open")
        self.refill()
        self.table.focus()
