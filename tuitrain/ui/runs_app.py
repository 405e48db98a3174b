"""The table of `tuitrain runs` in a terminal: sort (`s` cycles the column), filter (`/`),
Enter opens `watch` on the highlighted run, space marks runs, `c` compares the marked ones
(2 to 8). The view it opens comes back to this table on Escape or `q`, with the marks, the
filter, the sort and the highlighted run kept (`TableState`; `tuitrain.commands.runs`).

The filter is literal text (any column, case-insensitive), applied as you type (after a
pause of FILTER_DELAY_S: a burst of keys is one refill; Enter applies it at once and goes
back to the table, Escape closes the box and keeps it, Escape at the table clears it).
Sorting by best puts each metric's best run first, by the metric's goal (its header's
declaration, else its name's: min for a loss, max for an accuracy; rundir.summary's
judged_metric); runs of different metrics are grouped by metric. Keys cost what
they change, not the table's size: space updates one cell, `s` reorders the rows the table
holds, and rows are added again only when the filter changed which runs are shown; each
run's cells are made once (`bench/runs_keys.py`: 10,000 runs). Enter opens `watch` with the
paths after `--`: a run named `-h` is a run, not an option."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input, Static

from tuitrain.core.text import strip_controls
from tuitrain.rundir.summary import COLUMNS, cells
from tuitrain.rundir.summary import RunSummary as RunRow
from tuitrain.ui.screens.metrics import FILTER_DELAY_S
from tuitrain.ui.stopping import StoppingApp
from tuitrain.ui.widgets.panel import esc

MAX_FILTER = 200  # characters of filter text


def best_first(row: RunRow) -> tuple[bool, str, float]:
    """The sort key of the best column: runs with a best value first, grouped by metric,
    the best (by the metric's declared mode) first within each group."""
    if row.best is None:
        return (True, "", 0.0)
    mode = row.best_mode
    return (False, row.best_metric or "", -row.best if mode == "max" else row.best)


SORT_KEYS = {
    "run": lambda r: r.name,
    "status": lambda r: r.status,
    "preset": lambda r: r.preset or "",
    "steps": lambda r: r.steps or 0,
    "best": best_first,
    "throughput": lambda r: r.tokens_per_s or r.samples_per_s or 0.0,
    "duration": lambda r: r.duration_s or 0.0,
    "started": lambda r: r.started or "",
}


@dataclass
class TableState:
    """What the table keeps while a view it opened is on screen."""

    marked: set[str] = field(default_factory=set)
    pattern: str = ""
    sort_column: int = -1
    cursor: str | None = None  # the highlighted run's dir


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
        Binding("escape", "escape", "Clear filter"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, rows: Sequence[RunRow], state: TableState | None = None) -> None:
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
        self._filter_timer: Timer | None = None  # the pending as-you-type refill
        self.restore = state or TableState()
        self.kept: TableState | None = None  # the state when a view was chosen (state())
        self.marked = {m for m in self.restore.marked if m in self.by_dir}
        self.pattern = self.restore.pattern[:MAX_FILTER]
        self.sort_column = (
            self.restore.sort_column if -1 <= self.restore.sort_column < len(COLUMNS) else -1
        )
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
        if self.pattern:
            self.query_one("#filter", Input).value = self.pattern
        self.refill()
        self.table.focus()  # the filter's table when a filter came back (AUTO_FOCUS: #all)
        if self.restore.cursor in {r.run_dir for r in self.shown}:
            keys = [r.run_dir for r in self.shown]
            self.table.move_cursor(row=keys.index(self.restore.cursor))

    def state(self) -> TableState:
        """What to keep for the next table (after the view it opens closes)."""
        row = self.current()
        return TableState(
            set(self.marked), self.pattern, self.sort_column, row.run_dir if row else None
        )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "escape":  # offered while there is a filter to clear or a box to close
            return bool(self.pattern) or self.query_one("#filter", Input).has_class("-open")
        return True

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
            ascending = ("run", "status", "preset", "best")  # best: best_first's order
            rows.sort(key=SORT_KEYS[column], reverse=column not in ascending)
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
            self.kept = self.state()
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
        self.kept = self.state()
        self.exit(0)

    def action_sort(self) -> None:
        self.sort_column = (self.sort_column + 1) % len(COLUMNS)
        self.refill()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-open")
        box.focus()
        self.refresh_bindings()

    def on_input_changed(self, event: Input.Changed) -> None:
        """As you type: refill once the keys pause (a burst is one refill)."""
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self._filter_timer = self.set_timer(FILTER_DELAY_S, self.apply_filter)

    def apply_filter(self) -> None:
        self._filter_timer = None
        pattern = self.query_one("#filter", Input).value.strip()[:MAX_FILTER]
        if pattern != self.pattern:
            self.pattern = pattern
            self.refill()
        self.refresh_bindings()

    def close_filter(self) -> None:
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self.apply_filter()
        self.query_one("#filter", Input).remove_class("-open")
        self.table.focus()
        self.refresh_bindings()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.close_filter()

    def action_escape(self) -> None:
        """The box open: close it (the filter stays); else clear the filter."""
        box = self.query_one("#filter", Input)
        if box.has_class("-open"):
            self.close_filter()
        elif self.pattern:
            box.value = ""
            self.close_filter()
