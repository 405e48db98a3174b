"""One module per command (`tuitrain VERB`): parse, call, exit code. `tuitrain/cli.py`
dispatches to them."""
