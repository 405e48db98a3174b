"""The file-descriptor helpers a detached run leans on once its terminal is gone."""

from __future__ import annotations

import os
from pathlib import Path

from tuitrain.host.stdio import terminal_gone


def test_terminal_gone_once_the_pty_master_closed(tmp_path: Path) -> None:
    master, slave = os.openpty()
    try:
        assert not terminal_gone((slave,))  # a terminal still open
        os.close(master)  # its window closed, its SSH session ended
        assert terminal_gone((slave,))
    finally:
        os.close(slave)


def test_a_file_or_dev_null_is_never_gone(tmp_path: Path) -> None:
    with (tmp_path / "train.log").open("w") as log, open(os.devnull, "w") as null:
        assert not terminal_gone((log.fileno(), null.fileno()))


def test_a_pipe_whose_reader_left_is_gone() -> None:
    read_end, write_end = os.pipe()
    try:
        assert not terminal_gone((write_end,))
        os.close(read_end)
        assert terminal_gone((write_end,))
    finally:
        os.close(write_end)
