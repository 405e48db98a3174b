"""Item 4: UI overhead and key latency: the Textual app attached against `--no-ui`.

    python bench/ui_overhead.py --repeats 5 --preset fashion-mini

UI side: the real app (`tuitrain.ui.app.TuitrainApp` over an `RunHost`, as `run_app`
builds it, with the refresh timers users get: text 5 Hz, plots 2 Hz) in a real terminal: a
detached tmux session of --cols x --rows on a private tmux socket. The bench subclass adds
one hidden binding, `z`, whose handler appends time.monotonic() to a file; while the run
trains, the parent sends `z` with `tmux send-keys` every ~0.25 s (jittered) and pairs each
send with the next handler time: that is key-to-handler latency through tmux, the pty,
Textual's input parsing and the event loop (the tmux client's own start, measured alone and
reported, is included). It also notes the first frame (call_after_refresh after mount)
against the launch of the session: time to the first frame.
No-UI side: `python -m tuitrain --no-ui` with the same preset and overrides.

Throughput on both sides is the engine's samples/s from metrics.jsonl, first interval and
epoch-end intervals left out. Pairs alternate order. The pairs press no keys and the parent only
checks once a second whether the tmux session is still there (a user watching a run presses
nothing; `tmux send-keys` 4 times a second and reading the run's file would be the bench's own
load on the UI side only); the key latency comes from --latency-runs extra UI runs that do
press `z` (their throughput is reported apart, not in the ratio). Prints ratio UI / no-UI,
latency p50/p95, and where the UI's CPU goes: the app's main thread and the tmux server, in
cores used from mount to the run's end (from /proc). --threads sets OMP_NUM_THREADS on both
sides; --switch sets sys.setswitchinterval in the UI process (a GIL experiment);
--text-interval / --plot-interval replace the app's refresh intervals (an A/B of defaults).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, emit, machine, note, spread, train_stats

OVERRIDES = ['train.device="cpu"', "train.eval_every_epoch=false", "data.val_samples=1024"]
SOCKET = f"tuitrain-bench-{os.getpid()}"  # a private tmux server: other sessions stay untouched


def cpu_s(stat: Path) -> float:
    """User + system CPU seconds from a /proc/.../stat file (0 if it is gone)."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_ui(
    preset: str,
    overrides: list[str],
    run_dir: str,
    ping_file: str,
    switch: float | None,
    rates: tuple[float | None, float | None] = (None, None),
    windows: float | None = None,
) -> int:
    """Runs inside tmux: the app as run_app builds it, plus the hidden `z` ping binding.

    With `windows`, the app's two refresh timers are paused and resumed every `windows`
    seconds (`window on|off <time> <main-thread CPU s>` lines) and every train record is
    stamped as the store receives it (`train <time> <samples> <samples/s> <step>`)."""
    if switch:
        sys.setswitchinterval(switch)  # how long a thread may keep the GIL when another waits
    import tuitrain.ui.app as app_module

    text_s, plot_s = rates  # refresh intervals other than the app's (an A/B of the defaults)
    if text_s:
        app_module.TEXT_INTERVAL_S = text_s
    if plot_s:
        app_module.PLOT_INTERVAL_S = plot_s
    from textual.binding import Binding

    from tuitrain.core.config import load_preset
    from tuitrain.host.run import RunHost
    from tuitrain.metrics.store import MetricStore
    from tuitrain.ui.app import RunEnded, TuitrainApp

    pings = open(ping_file, "a", buffering=1)  # noqa: SIM115 - lives as long as the app

    app_dir = Path(sys.modules[TuitrainApp.__module__].__file__ or "").parent
    css = TuitrainApp.CSS_PATH or []

    class StampedStore(MetricStore):
        def push(self, record: Any) -> None:
            if windows and record.get("type") == "train":
                stamp = f"{time.monotonic()} {record['samples']} {record['samples_per_s']}"
                pings.write(f"train {stamp} {record['step']}\n")
            super().push(record)

    class PingApp(TuitrainApp):
        # CSS paths resolve next to the class's module: point them back at tuitrain/ui/
        CSS_PATH = [app_dir / c for c in ([css] if isinstance(css, (str, Path)) else css)]
        BINDINGS = [*TuitrainApp.BINDINGS, Binding("z", "bench_ping", show=False)]
        refresh_timers: list[Any]
        refreshing = True

        def set_interval(self, interval: float, callback: Any = None, **kwargs: Any) -> Any:
            timer = super().set_interval(interval, callback, **kwargs)
            if callback in (self.poll_text, self.poll_plots):  # the app's refresh timers
                self.refresh_timers.append(timer)
            return timer

        def on_mount(self) -> None:
            self.refresh_timers = []
            super().on_mount()
            self.call_after_refresh(lambda: pings.write(f"frame {time.monotonic()}\n"))
            self.cpu0, self.t0 = self.cpu_now(), time.monotonic()
            if windows:
                pings.write(f"window on {self.t0} {self.cpu0[0]}\n")
                self.next_toggle()

        def next_toggle(self) -> None:
            """Windows of 0.75-1.25 x `windows` seconds: a fixed length would keep the same
            phase to the refresh timers (3 s is a multiple of both), so the render of a tick
            fired just before every switch-off would always land in an off window."""
            assert windows
            self.set_timer(random.uniform(0.75, 1.25) * windows, self.toggle_refresh)

        def toggle_refresh(self) -> None:
            """Freeze or thaw the dashboard: the app stays attached, only its timers stop."""
            self.refreshing = not self.refreshing
            for timer in self.refresh_timers:
                timer.resume() if self.refreshing else timer.pause()
            state = "on" if self.refreshing else "off"
            pings.write(f"window {state} {time.monotonic()} {self.cpu_now()[0]}\n")
            self.next_toggle()

        @staticmethod
        def cpu_now() -> tuple[float, float]:
            """(main thread, whole process) CPU seconds; the process figure keeps the time
            of threads that have ended (the engine thread may be gone by on_run_ended)."""
            return cpu_s(Path(f"/proc/self/task/{os.getpid()}/stat")), cpu_s(
                Path("/proc/self/stat")
            )

        def action_bench_ping(self) -> None:
            pings.write(f"ping {time.monotonic()}\n")

        def on_run_ended(self, message: RunEnded) -> None:
            (main1, all1), wall = self.cpu_now(), time.monotonic() - self.t0
            main, everything = main1 - self.cpu0[0], all1 - self.cpu0[1]
            share = {  # CPU seconds per wall second, from mount to the run's end
                "ui_main_thread": main / wall,
                "engine_and_torch_threads": (everything - main) / wall,
            }
            pings.write(f"cpu {json.dumps(share)}\n")
            if windows:
                pings.write(f"window end {time.monotonic()} {main1}\n")
            self.exit(0)  # Textual calls SessionApp's handler too (each class in the MRO)

    cfg = load_preset(preset, overrides)
    host = RunHost(cfg, StampedStore(), run_dir=Path(run_dir))
    code = PingApp(host=host, overrides=overrides).run()
    host.join(30)
    return code or 0


def tmux(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True)


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a line being written
            out.append(json.loads(line))
    return out


def measure_ui(
    args: argparse.Namespace, overrides: list[str], tmp: Path, r: int | str, press: bool
) -> dict:
    run_dir, pings = tmp / f"ui-{r}", tmp / f"pings-{r}.txt"
    me = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child-ui",
        "--preset",
        args.preset,
        "--run-dir",
        str(run_dir),
        "--ping-file",
        str(pings),
    ]
    for o in overrides:
        me += ["--set", o]
    if args.switch:
        me += ["--switch", str(args.switch)]
    if args.text_interval:
        me += ["--text-interval", str(args.text_interval)]
    if args.plot_interval:
        me += ["--plot-interval", str(args.plot_interval)]
    if args.windows:
        me += ["--windows", str(args.windows)]
    if args.threads:
        me = ["env", f"OMP_NUM_THREADS={args.threads}", *me]
    session = f"ui{r}"
    launched = time.monotonic()
    tmux(
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        str(args.cols),
        "-y",
        str(args.rows),
        "-c",
        str(REPO),
        " ".join(f"'{a}'" for a in me),
    )
    server = tmux("display-message", "-p", "-t", session, "#{pid}").stdout.strip()
    server_stat = Path(f"/proc/{server}/stat")
    server_cpu0, server_t0 = cpu_s(server_stat), time.monotonic()
    sends: list[float] = []
    send_cost: list[float] = []
    deadline = launched + args.timeout
    total = None
    while time.monotonic() < deadline:
        if not press:  # a watching user: nothing to do but wait for the app to exit
            time.sleep(1.0)
            if tmux("has-session", "-t", session).returncode != 0:
                break
            continue
        time.sleep(random.uniform(0.15, 0.35))
        records = read_records(run_dir / "metrics.jsonl")
        header = next((x for x in records if x["type"] == "header"), None)
        if tmux("has-session", "-t", session).returncode != 0:
            break  # the app has exited (or failed to start: train_stats below says so)
        if header is None:
            continue
        total = header["total_steps"]
        if any(x["type"] == "train" and x["step"] >= total for x in records):
            break  # training is over: stop pressing
        t0 = time.monotonic()
        tmux("send-keys", "-t", session, "z")
        sends.append(t0)
        send_cost.append(time.monotonic() - t0)
    server_share = (cpu_s(server_stat) - server_cpu0) / (time.monotonic() - server_t0)
    while tmux("has-session", "-t", session).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    tmux("kill-session", "-t", session)
    lines = pings.read_text().split("\n") if pings.exists() else []
    frames = [float(x.split()[1]) for x in lines if x.startswith("frame")]
    cpu = next((json.loads(x[4:]) for x in lines if x.startswith("cpu ")), {})
    cpu["tmux_server"] = server_share
    handled = sorted(float(x.split()[1]) for x in lines if x.startswith("ping"))
    latencies, i = [], 0
    for t0 in sends:  # each send pairs with the first handler time after it
        while i < len(handled) and handled[i] < t0:
            i += 1
        if i < len(handled):
            latencies.append(handled[i] - t0)
            i += 1
    records = read_records(run_dir / "metrics.jsonl")
    stats = train_stats(records, skip=1)
    if args.windows:
        stats["windows"] = window_figures(lines, records)
    stats.update(
        cpu=cpu,
        latencies=latencies,
        sends=len(sends),
        send_cost=send_cost,
        first_frame_s=frames[0] - launched if frames else None,
    )
    return stats


def window_figures(lines: list[str], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Samples/s and main-thread CPU in the refresh-on against the refresh-off windows.

    A train interval (from the store's stamp back by its samples / samples/s) counts for a
    window when it lies wholly inside it; the first interval (warm-up) and intervals across
    an epoch end are left out, as in `train_stats`."""
    header = next((r for r in records if r.get("type") == "header"), {})
    per_epoch = int(header.get("steps_per_epoch") or 0)
    marks = [x.split() for x in lines if x.startswith("window ")]
    bounds = [(float(t), state, float(cpu)) for _, state, t, cpu in marks]
    trains = [tuple(map(float, x.split()[1:])) for x in lines if x.startswith("train ")]
    acc = {"on": [0.0, 0.0, 0.0, 0.0, 0], "off": [0.0, 0.0, 0.0, 0.0, 0]}
    for (t0, state, cpu0), (t1, _, cpu1) in zip(bounds, bounds[1:], strict=False):
        if state in acc:
            acc[state][2] += cpu1 - cpu0  # main-thread CPU seconds in the window
            acc[state][3] += t1 - t0
    for (_, s0, _, st0), (t, s1, sps, st1) in zip(trains, trains[1:], strict=False):
        if per_epoch and (st1 - 1) // per_epoch != st0 // per_epoch:
            continue
        n = s1 - s0
        start = t - n / sps
        for (w0, state, _), (w1, _, _) in zip(bounds, bounds[1:], strict=False):
            if w0 <= start and t <= w1 and state in acc:
                acc[state][0] += n
                acc[state][1] += n / sps
                acc[state][4] += 1
                break
    out: dict[str, Any] = {}
    for state, (n, wall, cpu, span, count) in acc.items():
        out[state] = {
            "samples_per_s": n / wall if wall else None,
            "intervals": count,
            "ui_main_thread_cores": cpu / span if span else None,
        }
    on, off = out["on"]["samples_per_s"], out["off"]["samples_per_s"]
    out["ratio_on_over_off"] = on / off if on and off else None
    return out


def measure_noui(args: argparse.Namespace, overrides: list[str], tmp: Path, r: int) -> dict:
    run_dir = tmp / f"noui-{r}"
    cmd = [
        sys.executable,
        "-m",
        "tuitrain",
        "--no-ui",
        "--preset",
        args.preset,
        "--run-dir",
        str(run_dir),
    ]
    for o in overrides:
        cmd += ["--set", o]
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}))
    subprocess.run(
        cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, timeout=args.timeout
    )
    return train_stats(read_records(run_dir / "metrics.jsonl"), skip=1)


def percentile(values: list[float], q: float) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="fashion-mini")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for both sides")
    parser.add_argument("--switch", type=float, help="sys.setswitchinterval in the UI process")
    parser.add_argument("--text-interval", type=float, help="the app's text refresh, seconds")
    parser.add_argument("--plot-interval", type=float, help="the app's chart refresh, seconds")
    parser.add_argument(
        "--latency-runs", type=int, default=2, help="extra UI runs pressing z (key latency)"
    )
    parser.add_argument(
        "--windows",
        type=float,
        help="instead of UI/no-UI pairs: --repeats UI runs whose refresh timers stop and "
        "start every WINDOWS seconds; compares the on and off windows within each run",
    )
    parser.add_argument("--cols", type=int, default=120)
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--child-ui", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--ping-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_ui:
        rates = (args.text_interval, args.plot_interval)
        code = child_ui(
            args.preset,
            args.overrides,
            args.run_dir,
            args.ping_file,
            args.switch,
            rates,
            args.windows,
        )
        sys.exit(code)
    overrides = [*OVERRIDES, *args.overrides]
    ui: list[dict[str, Any]] = []
    noui: list[dict[str, Any]] = []
    pressed: list[dict[str, Any]] = []  # the latency runs
    with tempfile.TemporaryDirectory(prefix="tuitrain-ui-bench-") as name:
        tmp = Path(name)
        for r in range(args.repeats if args.windows else 0):
            ui.append(measure_ui(args, overrides, tmp, r, press=False))
            w = ui[-1]["windows"]
            note(
                f"run {r}: on {w['on']['samples_per_s']:.0f} / off {w['off']['samples_per_s']:.0f}"
                f" samples/s = {w['ratio_on_over_off']:.3f} ({w['on']['intervals']} / "
                f"{w['off']['intervals']} intervals)"
            )
        for r in range(0 if args.windows else args.repeats):
            for side in ("ui", "noui") if r % 2 == 0 else ("noui", "ui"):
                if side == "ui":
                    ui.append(measure_ui(args, overrides, tmp, r, press=False))
                    out = ui[-1]
                else:
                    noui.append(measure_noui(args, overrides, tmp, r))
                    out = noui[-1]
                note(f"pair {r} {side}: {out['samples_per_s']:.0f} samples/s")
        for r in range(args.latency_runs):
            pressed.append(measure_ui(args, overrides, tmp, f"keys-{r}", press=True))
            out = pressed[-1]
            note(
                f"latency run {r}: {out['samples_per_s']:.0f} samples/s, "
                f"{len(out['latencies'])}/{out['sends']} keys handled"
            )
    latencies = [1e3 * x for o in pressed for x in o["latencies"]]
    emit(
        {
            "item": "4 UI overhead (app in tmux vs --no-ui) and key-to-handler latency",
            "machine": machine(),
            "command": " ".join(["python bench/ui_overhead.py", *sys.argv[1:]]),
            "preset": args.preset,
            "overrides": overrides,
            "terminal": f"tmux {args.cols}x{args.rows}",
            "omp_num_threads": args.threads or "torch default",
            "ui_switch_interval_s": args.switch or "python default (0.005)",
            "ui_refresh_s": {
                "text": args.text_interval or "app default",
                "plots": args.plot_interval or "app default",
            },
            "ui_samples_per_s": spread([o["samples_per_s"] for o in ui], 1),
            "noui_samples_per_s": spread([o["samples_per_s"] for o in noui], 1),
            "ratio_ui_over_noui": spread(
                [u["samples_per_s"] / n["samples_per_s"] for u, n in zip(ui, noui, strict=False)]
            ),
            "windows_s": args.windows,
            "window_ratio_on_over_off": spread(
                [u["windows"]["ratio_on_over_off"] for u in ui if "windows" in u]
            ),
            "window_samples_per_s": {
                state: spread(
                    [u["windows"][state]["samples_per_s"] for u in ui if "windows" in u], 1
                )
                for state in ("on", "off")
            },
            "window_ui_main_thread_cores": {
                state: spread(
                    [u["windows"][state]["ui_main_thread_cores"] for u in ui if "windows" in u], 3
                )
                for state in ("on", "off")
            },
            "key_latency_ms": {
                "p50": round(percentile(latencies, 50) or 0, 1),
                "p95": round(percentile(latencies, 95) or 0, 1),
                "max": round(max(latencies, default=0), 1),
                "n": len(latencies),
                "sent": sum(o["sends"] for o in pressed),
            },
            "latency_runs_samples_per_s": spread([o["samples_per_s"] for o in pressed], 1),
            "tmux_send_keys_ms": spread([1e3 * x for o in pressed for x in o["send_cost"]], 1),
            "cpu_cores_used": {
                name: spread([o["cpu"][name] for o in ui if name in o["cpu"]], 3)
                for name in ("ui_main_thread", "engine_and_torch_threads", "tmux_server")
            },
            "first_frame_s": spread(
                [o["first_frame_s"] for o in ui + pressed if o["first_frame_s"]], 2
            ),
            "goal": "ratio >= 0.95; key latency p95 < 50 ms",
        }
    )


if __name__ == "__main__":
    main()
