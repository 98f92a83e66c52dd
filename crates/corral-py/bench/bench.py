"""corral (Python) against subprocess.run, side by side in one run.

    python bench/bench.py            # full run (about a minute)
    python bench/bench.py --quick    # small sizes, a few seconds (CI)

Rows: (1) spawn + wait of `true` (median and p99, interleaved runs);
(2) peak RSS (VmHWM) of a Python process that runs a command writing N bytes to its
captured stdout (each measurement in a fresh interpreter); (3) how long
`run` takes to return when the command exits at once but a backgrounded
grandchild keeps its stdout open. Prints one markdown table. Asserts nothing
about speed; exits non-zero only when a run does not end as expected or a
benchmark process outlives its run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import corral


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def spawn_row(iters: int):
    """Interleaved, rotating start: subprocess.run, corral.run (auto: a cgroup
    when one can be had), corral.run in a process group."""
    true = "/bin/true" if os.path.exists("/bin/true") else "true"
    runs = [
        lambda: subprocess.run([true], capture_output=True).returncode,
        lambda: corral.run([true], capture_output=True).returncode,
        lambda: corral.run([true], capture_output=True, containment="process_group").returncode,
    ]
    times = [[], [], []]
    for i in range(iters):
        for k in range(3):
            which = (i + k) % 3
            t0 = time.perf_counter()
            rc = runs[which]()
            times[which].append(time.perf_counter() - t0)
            assert rc == 0
    return times


RSS_CHILD = """
import resource, subprocess, sys
n = int(sys.argv[1]); which = sys.argv[2]
argv = ["head", "-c", str(n), "/dev/zero"]
if which == "subprocess":
    r = subprocess.run(argv, capture_output=True)
    assert r.returncode == 0 and len(r.stdout) == n
else:
    import corral
    kw = {} if which == "corral-default" else {"capture_limit": 1 << 20}
    r = corral.run(argv, capture_output=True, **kw)
    assert r.returncode == 0 and r.report["stdout_bytes"] == n, r
print([l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1])
"""


def rss_row(nbytes: int):
    out = {}
    base = subprocess.run(
        [sys.executable, "-c", "import corral; print([l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1])"],
        capture_output=True, text=True, check=True,
    )
    out["baseline"] = int(base.stdout) / 1024
    for which in ("subprocess", "corral-1MiB", "corral-default"):
        r = subprocess.run([sys.executable, "-c", RSS_CHILD, str(nbytes), which], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"rss run {which} failed: {r.stderr}")
        out[which] = int(r.stdout.split()[-1]) / 1024
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def held_row(iters: int, hold: float, wait_delay: float, tmp: str):
    """The command prints, backgrounds a holder of its stdout and exits 0."""
    script = f'echo $$ > /dev/null; sleep {hold} & echo $! > "$PIDFILE"; echo ok; exit 0'
    sub, cor, subt = [], [], []
    holders = []
    for i in range(iters):
        for which in (0, 1, 2):
            pidfile = os.path.join(tmp, f"holder-{i}-{which}")
            env = dict(os.environ, PIDFILE=pidfile)
            t0 = time.perf_counter()
            if which == 0:
                # subprocess.run waits for end of file on the pipe: the holder's
                # lifetime (a timeout would not help: after killing the child it
                # waits for end of file again).
                r = subprocess.run(["sh", "-c", script], capture_output=True, env=env)
                assert r.returncode == 0
                sub.append(time.perf_counter() - t0)
            elif which == 2:
                # With a timeout, on POSIX subprocess.run raises TimeoutExpired
                # at the timeout although the command itself exited 0 at once,
                # and leaves the holder running.
                try:
                    subprocess.run(["sh", "-c", script], capture_output=True, env=env, timeout=hold / 3)
                    raise SystemExit("subprocess.run with a timeout returned normally")
                except subprocess.TimeoutExpired:
                    subt.append(time.perf_counter() - t0)
            else:
                r = corral.run(["sh", "-c", script], env=env, wait_delay=wait_delay, capture_output=True)
                assert r.outcome == "output_held", r
                cor.append(time.perf_counter() - t0)
                holders.append(int(open(pidfile).read()))
    time.sleep(0.2)
    left = [p for p in holders if alive(p)]
    if left:
        raise SystemExit(f"corral left holders running: {left}")
    return sub, cor, subt


def popen_row(iters: int, nbytes: int):
    """Popen + communicate: `cat` echoes nbytes through stdin and stdout
    (interleaved, rotating start)."""
    data = b"x" * nbytes
    runs = [
        lambda: subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE),
        lambda: corral.Popen(["cat"], stdin=corral.PIPE, stdout=corral.PIPE),
    ]
    times = [[], []]
    for i in range(iters):
        for k in range(2):
            which = (i + k) % 2
            t0 = time.perf_counter()
            p = runs[which]()
            out, _ = p.communicate(data)
            times[which].append(time.perf_counter() - t0)
            assert p.returncode == 0 and len(out) == nbytes
    return times


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    spawn_iters = 40 if a.quick else 1000
    nbytes = 30_000_000 if a.quick else 300_000_000
    held_iters, hold = (2, 0.6) if a.quick else (5, 3.0)
    wait_delay = 0.2

    sub, cor, cor_pg = spawn_row(spawn_iters)
    popen_iters = 20 if a.quick else 300
    psub_small, pcor_small = popen_row(popen_iters, 1000)
    psub_big, pcor_big = popen_row(max(4, popen_iters // 10), 16 << 20)
    rss = rss_row(nbytes)
    with tempfile.TemporaryDirectory() as tmp:
        hsub, hcor, hsubt = held_row(held_iters, hold, wait_delay, tmp)

    us = lambda s: f"{s * 1e6:.0f} µs"
    ms = lambda s: f"{s * 1e3:.0f} ms"
    mode = "quick" if a.quick else "full"
    print(f"corral Python bench ({mode} mode): Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, corral containment "
          f"{corral.run(['true']).containment}; the Popen rows compare subprocess.Popen with corral.Popen")
    print()
    print("| row | subprocess.run | corral.run | corral / subprocess |")
    print("|---|---|---|---|")
    ms_sub, ms_cor = statistics.median(sub), statistics.median(cor)
    print(f"| spawn + wait of `true`, median ({spawn_iters} runs) | {us(ms_sub)} | {us(ms_cor)} | {ms_cor / ms_sub:.2f} |")
    p_sub, p_cor = pct(sub, 99), pct(cor, 99)
    print(f"| spawn + wait of `true`, p99 | {us(p_sub)} | {us(p_cor)} | {p_cor / p_sub:.2f} |")
    m_pg, p_pg = statistics.median(cor_pg), pct(cor_pg, 99)
    print(f"| spawn + wait of `true`, `containment=\"process_group\"`, median / p99 | {us(ms_sub)} / {us(p_sub)} | "
          f"{us(m_pg)} / {us(p_pg)} | {m_pg / ms_sub:.2f} / {p_pg / p_sub:.2f} |")
    for label, ps, pc in (("1 kB", psub_small, pcor_small), ("16 MiB", psub_big, pcor_big)):
        a_s, a_c = statistics.median(ps), statistics.median(pc)
        print(f"| Popen + communicate, `cat` echoes {label}, median ({len(ps)} runs) | {us(a_s)} | {us(a_c)} | {a_c / a_s:.2f} |")
    mb = nbytes / 1e6
    print(f"| peak RSS, {mb:.0f} MB of stdout captured (capture_limit=1 MiB) | {rss['subprocess']:.1f} MB | "
          f"{rss['corral-1MiB']:.1f} MB | {rss['corral-1MiB'] / rss['subprocess']:.2f} |")
    print(f"| peak RSS, {mb:.0f} MB of stdout captured (default capture_limit, 16 MiB) | {rss['subprocess']:.1f} MB | "
          f"{rss['corral-default']:.1f} MB | {rss['corral-default'] / rss['subprocess']:.2f} |")
    print(f"| peak RSS of the interpreter with corral imported, no run | | {rss['baseline']:.1f} MB | |")
    h_sub, h_cor = statistics.median(hsub), statistics.median(hcor)
    print(f"| return time, grandchild holds stdout {hold:g} s (wait_delay {wait_delay:g} s), median of {held_iters} | "
          f"{ms(h_sub)} | {ms(h_cor)} | {h_cor / h_sub:.2f} |")
    h_subt = statistics.median(hsubt)
    print(f"| same, subprocess.run(timeout={hold / 3:g}) | {ms(h_subt)} (TimeoutExpired) | {ms(h_cor)} | "
          f"{h_cor / h_subt:.2f} |")
    print()
    print("subprocess.run returns only when the holder exits, or raises TimeoutExpired at its timeout although "
          "the command exited 0 at once; either way it leaves the holder running. corral returns at the wait "
          "delay with outcome output_held and the holder killed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
