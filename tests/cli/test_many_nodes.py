"""Several nodes on loopback: two torchrun agents meeting through a c10d rendezvous, and
`tuitrain --nproc 1` in a (synthetic) two-node SLURM step, each give one run, rank 0's, whose
train records hold both ranks."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.cli.test_ddp import env, free_port, records
from tests.cli.test_fsdp import TINY
from tuitrain.ui.ranks import node_rows

STEPS = 12  # TINY's --max-steps


def run_both(commands: list[list[str]], envs: list[dict[str, str]]) -> None:
    """Start every agent, then wait for each (the rendezvous needs them all at once)."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=e) for cmd, e in zip(commands, envs, strict=True)]  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-3000:]


def check_one_run_of_two_nodes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # one run dir
    recs = records(run_dir)
    assert recs[0]["type"] == "header" and recs[0]["world_size"] == 2
    assert recs[-1]["type"] == "end" and recs[-1]["status"] == "completed"
    assert recs[-1]["step"] == STEPS
    trains = [r for r in recs if r["type"] == "train"]
    assert trains and all(len(r["rank_step_time_s"]) == 2 for r in trains)
    assert all(len(r["rank_busy_s"]) == 2 for r in trains)
    # the engine names each rank's node (torchrun's GROUP_RANK): one row per node
    assert all(r["rank_node"] == [0, 1] for r in trains)
    assert node_rows(trains[-1])[0] and [n.ranks for n in node_rows(trains[-1])[0]] == [(0,), (1,)]
    assert (run_dir / "rank-1.log").is_file()  # the other node's rank logs beside rank 0


@pytest.mark.slow
def test_two_torchrun_agents_on_loopback_write_one_run(tmp_path: Path) -> None:
    endpoint, rdzv_id = f"127.0.0.1:{free_port()}", uuid.uuid4().hex[:12]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", rdzv_id,
           "-m", "tuitrain", *TINY, "--run-dir", str(tmp_path / "run")]  # fmt: skip
    run_both([cmd, cmd], [env(), env()])
    check_one_run_of_two_nodes(tmp_path)


@pytest.mark.slow
def test_nproc_in_a_two_node_slurm_step_fills_the_rendezvous_from_slurm(tmp_path: Path) -> None:
    job = str(uuid.uuid4().int % 10**7)
    slurm = {"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_JOB_NUM_NODES": "2",
             "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "1",
             "SLURM_JOB_NODELIST": "127.0.0.1", "MASTER_PORT": str(free_port())}  # fmt: skip
    cmd = [sys.executable, "-m", "tuitrain", "--nproc", "1", *TINY, "--run-dir",
           str(tmp_path / "run")]  # fmt: skip
    run_both([cmd, cmd], [env(**slurm, SLURM_NODEID=str(n)) for n in (0, 1)])
    check_one_run_of_two_nodes(tmp_path)
