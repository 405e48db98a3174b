"""`tuitrain --nproc N`'s torchrun arguments: one node, a plain several-node launch, and
SLURM's variables read into a c10d rendezvous (synthetic SLURM environments)."""

from __future__ import annotations

import pytest

from tuitrain.commands.train import without_nproc
from tuitrain.core.errors import UserError
from tuitrain.host.launch import first_host, launcher_args

TWO_NODES = {  # what srun sets in each task of `srun -N2 --ntasks-per-node=1` (node 1 here)
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
}


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [
        ("node[01-04,07],gpu3", "node01"),
        ("gpu3,node[01-04]", "gpu3"),
        ("node[7,01-04]", "node7"),
        ("rack[1-2]-n[08-09]", "rack1-n08"),
        ("a[3-4]b", "a3b"),
        ("login1", "login1"),
    ],
)
def test_the_first_host_of_a_compressed_node_list(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


def test_an_unclosed_node_list_is_one_sentence() -> None:
    with pytest.raises(UserError, match=r"unclosed '\['"):
        first_host("node[01-04")


def test_one_node_is_standalone_in_slurm_or_not() -> None:
    assert launcher_args(4, {}) == ["--standalone", "--nproc_per_node=4"]
    one = {**TWO_NODES, "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1"}
    assert launcher_args(4, one) == ["--standalone", "--nproc_per_node=4"]


def test_two_slurm_nodes_meet_at_the_first_one() -> None:
    assert launcher_args(8, TWO_NODES) == [
        "--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=gpu07:29742",
        "--rdzv_id=4242", "--nproc_per_node=8",
    ]  # fmt: skip
    step = {**TWO_NODES, "MASTER_PORT": "31000", "SLURM_STEP_NODELIST": "gpu[08,07]"}
    assert "--rdzv_endpoint=gpu08:31000" in launcher_args(8, step)  # the step's own nodes


def test_slurm_disagreeing_with_one_torchrun_per_node_is_one_sentence() -> None:
    many = {**TWO_NODES, "SLURM_NTASKS_PER_NODE": "4"}
    with pytest.raises(UserError, match="4 tasks per node.*--ntasks-per-node=1"):
        launcher_args(2, many)
    packed = {**TWO_NODES, "SLURM_NTASKS_PER_NODE": "", "SLURM_TASKS_PER_NODE": "2(x2)"}
    with pytest.raises(UserError, match="2 tasks per node"):
        launcher_args(2, packed)
    batch = {k: v for k, v in TWO_NODES.items() if k != "SLURM_STEP_ID"}
    with pytest.raises(UserError, match="outside srun"):
        launcher_args(2, batch)
    with pytest.raises(UserError, match="outside srun"):
        launcher_args(2, {**TWO_NODES, "SLURM_STEP_ID": "4294967294"})  # the batch step
    with pytest.raises(UserError, match="SLURM_JOB_NODELIST is not set"):
        launcher_args(2, {**TWO_NODES, "SLURM_JOB_NODELIST": ""})
    with pytest.raises(UserError, match="SLURM_NNODES"):
        launcher_args(2, {**TWO_NODES, "SLURM_JOB_NUM_NODES": "", "SLURM_NNODES": "two"})


def test_a_plain_several_node_launch_passes_through_and_wins_over_slurm() -> None:
    args = launcher_args(2, TWO_NODES, nnodes=3, rdzv_endpoint="10.0.0.1:29400")
    assert args == ["--nnodes=3", "--nproc_per_node=2", "--rdzv_backend=c10d",
                    "--rdzv_endpoint=10.0.0.1:29400", "--rdzv_id=tuitrain"]  # fmt: skip
    with pytest.raises(UserError, match="go together"):
        launcher_args(2, {}, nnodes=2)
    with pytest.raises(UserError, match="HOST or HOST:PORT"):
        launcher_args(2, {}, nnodes=2, rdzv_endpoint=":29400")


def test_the_ranks_command_line_has_no_launcher_flags() -> None:
    argv = ["--nproc", "2", "--nnodes=2", "--rdzv-endpoint", "h:1", "--no-ui", "--max-steps", "3"]
    assert without_nproc(argv) == ["--no-ui", "--max-steps", "3"]


@pytest.mark.parametrize("port", ["abc", "99999", "0", "-1", "29 500", "２９５００"])
def test_a_slurm_master_port_that_is_no_port_is_one_sentence(port: str) -> None:
    with pytest.raises(UserError, match=r"MASTER_PORT=.* is not a port number \(1 to 65535\)"):
        launcher_args(8, {**TWO_NODES, "MASTER_PORT": port})


@pytest.mark.parametrize("endpoint", ["h:99999", "h:abc", "h:0", "[::1]:70000", "[::1]x"])
def test_a_rendezvous_endpoint_whose_port_is_no_port_is_one_sentence(endpoint: str) -> None:
    with pytest.raises(UserError, match=r"--rdzv-endpoint"):
        launcher_args(2, {}, nnodes=2, rdzv_endpoint=endpoint)


@pytest.mark.parametrize("endpoint", ["h", "h:29400", "[::1]:29400", "fe80::1", "10.0.0.1:1"])
def test_good_rendezvous_endpoints_pass_through(endpoint: str) -> None:
    assert f"--rdzv_endpoint={endpoint}" in launcher_args(2, {}, nnodes=2, rdzv_endpoint=endpoint)


def test_the_cli_says_a_bad_port_in_one_line_and_exits_2(capsys: pytest.CaptureFixture) -> None:
    from tuitrain.cli import main

    code = main(["--nproc", "2", "--nnodes", "2", "--rdzv-endpoint", "h:99999", "--no-ui"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "port number" in err[0] and "Traceback" not in err[0], err


def test_a_taken_slurm_port_on_the_first_node_is_refused_and_a_free_one_passes() -> None:
    """Job ids 1,000 apart map to one port: on the node that hosts the rendezvous, a port
    another process listens on is one sentence before torchrun starts."""
    import socket

    host = socket.gethostname().split(".")[0]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other_job:
        other_job.bind(("", 0))
        other_job.listen()
        taken = other_job.getsockname()[1]
        here = {**TWO_NODES, "SLURM_JOB_NODELIST": f"{host},gpu99", "MASTER_PORT": str(taken)}
        with pytest.raises(UserError, match=f"port {taken} .*already in use on {host}"):
            launcher_args(8, here)
        elsewhere = {**here, "SLURM_JOB_NODELIST": "gpu98,gpu99"}  # not this node: no probe
        assert f"--rdzv_endpoint=gpu98:{taken}" in launcher_args(8, elsewhere)
    assert f"--rdzv_endpoint={host}:{taken}" in launcher_args(8, here)  # free again
