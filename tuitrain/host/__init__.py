"""Hosting a run: one Textual-free way to run it (headless, beside the UI, parity, DDP
rank 0), signals, the standard streams, the --nproc launcher, the on_alert hook runner."""
