"""Modal screens: help, preset picker, profile table and the parity check."""
