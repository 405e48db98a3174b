"""Dashboard widgets, one per module: status line, banner, metric panels and the event log."""
