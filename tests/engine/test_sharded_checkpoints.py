"""Sharded checkpoints (checkpoint.format, a ckpt-step<N>.dcp folder torch.distributed.checkpoint
writes) in one process: they read back as the whole file of the same state does, they are
listed, picked and pruned as whole ones are, a failed save leaves none, and a folder that
could run code or read outside itself is refused before DCP touches it."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tuitrain.engine.checkpoint import (
    LATEST,
    CheckpointError,
    checkpoint_dir,
    find_latest,
    list_checkpoints,
    load_checkpoint,
    save_sharded,
)
from tuitrain.engine.distributed import DistInfo
from tuitrain.engine.strategy import Single


def trained() -> tuple[Single, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    strategy = Single(DistInfo(), torch.device("cpu"))
    strategy.wrap(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.9))
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    return strategy, optimizer


def save(run_dir: Path, step: int, keep: int = 3, **extra: Any) -> Path:
    strategy, optimizer = trained()
    shards, groups = strategy.sharded_state(optimizer)
    own = {"step": step, "preset": "p", "param_groups": groups, **extra}
    return save_sharded(run_dir, step, 0, shards, own, keep, strategy.agree)


def test_a_sharded_checkpoint_reads_back_as_the_whole_state(tmp_path: Path) -> None:
    strategy, optimizer = trained()
    path = save(tmp_path, 7)
    assert path == checkpoint_dir(tmp_path) / "ckpt-step00000007.dcp" and path.is_dir()
    assert {p.name for p in path.iterdir()} == {".metadata", "__0_0.distcp", "state.pt"}
    # the metadata rank 0 saved is a plain torch file: readable without torch.distributed
    head = torch.load(path / "state.pt", weights_only=True)
    assert head["step"] == 7 and "model" not in head
    state = load_checkpoint(path)
    assert state["step"] == 7 and state["preset"] == "p" and "param_groups" not in state
    whole = strategy.model_state_dict()
    assert list(state["model"]) == list(whole)
    assert all(torch.equal(state["model"][k], v) for k, v in whole.items())
    # the optimizer in its own format (numbered), loadable by a plain optimizer
    own = optimizer.state_dict()
    assert state["optimizer"]["param_groups"] == own["param_groups"]
    for i, moments in own["state"].items():
        for name, value in moments.items():
            assert torch.equal(state["optimizer"]["state"][i][name], value)
    fresh = torch.optim.AdamW(strategy.plain().parameters(), lr=1.0)
    fresh.load_state_dict(state["optimizer"])
    assert fresh.param_groups[0]["betas"] == (0.8, 0.9)


def test_sharded_checkpoints_are_listed_picked_and_pruned(tmp_path: Path) -> None:
    for step in (2, 4, 6, 8):
        save(tmp_path, step, keep=2)
    folder = checkpoint_dir(tmp_path)
    assert [p.name for p in list_checkpoints(folder)] == [
        "ckpt-step00000008.dcp",
        "ckpt-step00000006.dcp",
    ]
    assert (folder / LATEST).read_text().strip() == "ckpt-step00000008.dcp"
    assert find_latest(tmp_path).name == "ckpt-step00000008.dcp"
    # a save killed midway leaves its temp folder: never listed, removed by the next save
    (folder / ".ckpt-step00000010.dcp.tmp").mkdir()
    (folder / ".ckpt-step00000010.dcp.tmp" / "__0_0.distcp").write_bytes(b"half")
    assert find_latest(tmp_path).name == "ckpt-step00000008.dcp"
    save(tmp_path, 9, keep=2)
    assert not (folder / ".ckpt-step00000010.dcp.tmp").exists()
    assert sorted(p.name for p in folder.iterdir()) == [
        "ckpt-step00000008.dcp",
        "ckpt-step00000009.dcp",
        LATEST,
    ]


def test_a_failed_sharded_save_leaves_no_checkpoint(tmp_path: Path) -> None:
    save(tmp_path, 2)
    with pytest.raises(OSError):
        save(tmp_path, 4, unsaveable=lambda: None)  # torch.save cannot write it
    folder = checkpoint_dir(tmp_path)
    assert [p.name for p in list_checkpoints(folder)] == ["ckpt-step00000002.dcp"]
    assert not any(p.name.startswith(".") for p in folder.iterdir())
    assert find_latest(tmp_path).name == "ckpt-step00000002.dcp"


def test_a_part_rank_0_cannot_see_fails_the_save_on_every_rank(tmp_path: Path) -> None:
    """Ranks on nodes that share no filesystem each write into a temp folder of their own:
    rank 0 does not see rank 1's part, so the folder is not put in place (a checkpoint that
    could never load), and the error says what to do."""
    save(tmp_path, 2)
    strategy, optimizer = trained()
    shards, groups = strategy.sharded_state(optimizer)
    own = {"step": 4, "preset": "p", "param_groups": groups}
    with pytest.raises(OSError, match="rank 1's part of the checkpoint is not in .* shares, or"):
        save_sharded(tmp_path, 4, 0, shards, own, 3, strategy.agree, world_size=2)
    folder = checkpoint_dir(tmp_path)
    assert [p.name for p in list_checkpoints(folder)] == ["ckpt-step00000002.dcp"]
    assert not any(p.name.startswith(".") for p in folder.iterdir())
    assert find_latest(tmp_path).name == "ckpt-step00000002.dcp"


class Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch pwned",))


def test_a_metadata_that_would_run_code_is_refused_unrun(tmp_path: Path) -> None:
    path = save(tmp_path, 3)
    marker = tmp_path / "pwned"
    (path / ".metadata").write_bytes(pickle.dumps(Boom()))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(CheckpointError, match=r"was refused: .*posix\.system"):
            load_checkpoint(path)
    finally:
        os.chdir(cwd)
    assert not marker.exists()
    # find_latest passes over it, naming why
    skipped: list[str] = []
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        find_latest(tmp_path, skipped)
    assert "refused" in skipped[0]


def test_non_tensor_items_strays_and_broken_shards_are_refused(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    path = save(tmp_path, 3)
    good = (path / ".metadata").read_bytes()
    metadata = pickle.loads(good)
    # an item DCP would load with torch.load(weights_only=False)
    metadata.state_dict_metadata["model.evil"] = BytesStorageMetadata()
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match="model.evil is not a tensor"):
        load_checkpoint(path)
    # data named outside the folder's own shard files
    metadata = pickle.loads(good)
    for info in metadata.storage_data.values():
        info.relative_path = "../../etc/passwd"
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match="outside its own shard files"):
        load_checkpoint(path)
    (path / ".metadata").write_bytes(good)
    load_checkpoint(path)  # whole again
    # a link or a stray file in the folder
    os.symlink("/etc/passwd", path / "rank1.pt")
    with pytest.raises(CheckpointError, match="holds 'rank1.pt'"):
        load_checkpoint(path)
    (path / "rank1.pt").unlink()
    # a truncated shard
    shard = path / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="truncated or corrupt shard"):
        load_checkpoint(path)
    # an empty metadata
    (path / ".metadata").write_bytes(b"")
    with pytest.raises(CheckpointError, match="corrupt .metadata"):
        load_checkpoint(path)
    # a plain folder is named as such
    with pytest.raises(CheckpointError, match="is a folder, not a sharded checkpoint"):
        load_checkpoint(tmp_path)


def test_export_names_the_run_dir_of_a_checkpoint_it_is_given(tmp_path: Path, capsys) -> None:
    from tuitrain.commands.export import main

    path = save(tmp_path, 3)
    assert main([str(path), "--format", "csv"]) == 2
    err = capsys.readouterr().err
    assert f"{path} is a checkpoint" in err and f"pass the run dir ({tmp_path})" in err


def test_the_ending_lines_count_sharded_checkpoints(tmp_path: Path) -> None:
    from tuitrain.rundir.ending import checkpoint_count

    save(tmp_path, 2)
    save(tmp_path, 4)
    assert checkpoint_count(tmp_path) == 2


def test_a_metadata_naming_more_than_the_shards_hold_is_refused(tmp_path: Path) -> None:
    """Hostile round 5: one tensor named 400 more times (each name its own storage entry over
    the same bytes) would be read once per name; a small shard declared as a huge tensor
    would be allocated whole. Both are refused before DCP reads a byte."""
    import copy

    from torch.distributed.checkpoint.metadata import MetadataIndex

    path = save(tmp_path, 3)
    good = (path / ".metadata").read_bytes()
    metadata = pickle.loads(good)
    item = metadata.state_dict_metadata["model.0.weight"]
    index = next(k for k in metadata.storage_data if k.fqn == "model.0.weight")
    for n in range(400):
        name = f"model.copy{n}"
        metadata.state_dict_metadata[name] = copy.deepcopy(item)
        metadata.storage_data[MetadataIndex(name, index.offset, index.index)] = copy.deepcopy(
            metadata.storage_data[index]
        )
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match="several entries, more than its shard files hold"):
        load_checkpoint(path)
    # the same bytes declared as a 4 GB tensor
    metadata = pickle.loads(good)
    metadata.state_dict_metadata["model.0.weight"].chunks[0].sizes = torch.Size([32768, 32768])
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match=r"of 4,294,9\d\d,\d\d\d bytes, where its shard"):
        load_checkpoint(path)
    # a storage entry past the end of its shard file
    metadata = pickle.loads(good)
    metadata.storage_data[index].length = 10**9
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(
        CheckpointError, match=r"truncated or corrupt shard \(__0_0.distcp ends before"
    ):
        load_checkpoint(path)
    (path / ".metadata").write_bytes(good)
    assert load_checkpoint(path)["step"] == 3  # whole again


@pytest.mark.parametrize("key", ["extra.weight", "optim.state.9.weight.exp_avg", "optim.other"])
def test_a_metadata_naming_keys_the_model_does_not_have_is_refused(
    tmp_path: Path, key: str
) -> None:
    """A key outside the model and its optimizer's state was loaded, then dropped unseen."""
    path = save(tmp_path, 3)
    metadata = pickle.loads((path / ".metadata").read_bytes())
    renamed = "optim.state.2.bias.step"
    metadata.state_dict_metadata[key] = metadata.state_dict_metadata.pop(renamed)
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match=f"names '{key}', which is neither a model param"):
        load_checkpoint(path)
