"""The parity check and distributed runs: it runs in one process (distributed.strategy is
ignored there, as by every one-process run) and refuses to run as one rank of a
multi-process job, where every rank would run the whole check into the same run dir."""

from __future__ import annotations

import pytest

from tuitrain.core.config import load_preset
from tuitrain.core.errors import UserError
from tuitrain.engine.parity import parity


def test_parity_as_a_rank_of_a_torchrun_job_is_one_sentence(monkeypatch) -> None:
    cfg = load_preset("charlm-mini", ['distributed.strategy="fsdp"'])
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(UserError) as err:
        parity(cfg, epochs=1, mixed="bf16")
    assert str(err.value) == (
        "tuitrain parity runs in one process (both runs on one device), not as a rank of a "
        "2-process job; run it without torchrun or --nproc."
    )
