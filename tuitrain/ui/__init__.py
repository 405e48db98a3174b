"""The Textual UI: a live dashboard over a run hosted in a background thread.

`tuitrain.ui.app.run_app(cfg, overrides)` is the entry point the CLI calls. The UI never owns
a torch object of a live run: it polls a `MetricStore` snapshot on timers and steers the run
through the engine's `Control`.
"""
