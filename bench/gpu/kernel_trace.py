"""Where a decoding step's GPU time goes, from a process's timeline recorded by
bench/gpu/kernel_trace.c (bench/results/llm-gpu.md, "The GPU's timeline of a
step"):

    kernel_trace.py TRACE.tsv [--boundary REGEX] [--top N]

A decoding step ends with one kernel matching REGEX (default: the argmax of
greedy decoding, MLX's `arg_reduce` and PyTorch's `ArgMax`). Consecutive
steps with about the same number of kernels and no long pause form a phase
(one generation); phases of the same kernel count are summed up together.
For each: steps, kernels a step, and medians over its steps of

- wall: from one step's last kernel's end to the next's;
- busy: the time some kernel, copy or memset ran (their union);
- idle: wall - busy, the device waiting for work, and of it the time
  before the step's first kernel and over its first 100 kernels;
- lag (when the trace has the driver's calls): a kernel's start after the
  end of the driver call that launched it, the median over the step's
  kernels (small: the device waits for the host's launches; large: the host
  is ahead of the device); the host's driver calls a step, how many, and
  their time.

Then the kernels that take the most of a step's busy time, by name.

Last, the stretches of kernels the device ran with no pause of 0.5 ms or
more (a prompt's pass, say), summed up by their kernel count: how many,
their busy time and span, and their kernels.
"""

import argparse
import bisect
import collections
import re
import statistics
import subprocess


def load(path):
    kernels, others, driver = [], [], {}
    header = ""
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                header = line[2:].strip()
                continue
            parts = line.split(" ", 5)
            kind = parts[0]
            start, end = int(parts[1]), int(parts[2])
            if kind == "k":
                kernels.append((start, end, int(parts[4]), parts[5].rstrip("\n")))
            elif kind == "d":
                driver[int(parts[4])] = (start, end, int(parts[3]))
            else:
                others.append((start, end))
    kernels.sort()
    others.sort()
    return header, kernels, others, driver


class Busy:
    """The union of the device's intervals (kernels, copies, memsets), as
    disjoint sorted intervals, to ask how much of [lo, hi] it covers."""

    def __init__(self, intervals):
        merged = []
        for s, e in sorted(intervals):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self.starts = [m[0] for m in merged]
        self.merged = merged

    def within(self, lo, hi):
        i = max(bisect.bisect_right(self.starts, lo) - 1, 0)
        total = 0
        while i < len(self.merged) and self.merged[i][0] < hi:
            s, e = max(self.merged[i][0], lo), min(self.merged[i][1], hi)
            total += max(e - s, 0)
            i += 1
        return total


def short(names):
    """Kernel names demangled where c++filt is there, templates cut."""
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = list(names)
    cut = []
    for n in out[: len(names)]:
        depth, kept = 0, []
        for ch in n:
            if ch == "<":
                depth += 1
                if depth == 1:
                    kept.append("<…>")
            elif ch == ">":
                depth -= 1
            elif depth == 0:
                kept.append(ch)
        cut.append("".join(kept)[:100])
    return cut


def top_kernels(groups, top):
    """The kernels taking the most time in `groups` (lists of kernels), by
    name: (µs a group, count a group, name)."""
    by_name = collections.defaultdict(lambda: [0, 0])
    for g in groups:
        for k in g:
            by_name[k[3]][0] += k[1] - k[0]
            by_name[k[3]][1] += 1
    best = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
    n = len(groups)
    return [(ns / n / 1e3, c / n, label) for (_, (ns, c)), label in zip(best, short([b[0] for b in best]))]


def bursts_of(kernels, busy, top, pause=500_000):
    bursts, current, reach = [], [], None
    for k in kernels:
        if current and k[0] - reach >= pause:
            bursts.append(current)
            current, reach = [], None
        current.append(k)
        reach = k[1] if reach is None else max(reach, k[1])
    if current:
        bursts.append(current)
    kinds = collections.defaultdict(list)
    for b in bursts:
        if 50 <= len(b) <= 20000:
            kinds[len(b)].append(b)
    ranked = sorted(kinds.items(), key=lambda kv: -len(kv[1]) * sum(k[1] - k[0] for k in kv[1][0]))
    for n, group in [kv for kv in ranked if len(kv[1]) >= 3][:8]:
        spans = [b[-1][1] - b[0][0] for b in group]
        busys = [busy.within(b[0][0], max(k[1] for k in b)) for b in group]
        print(f"\n-- {len(group)} bursts of {n} kernels: span {statistics.median(spans) / 1e3:.1f} µs, "
              f"busy {statistics.median(busys) / 1e3:.1f} µs (medians)")
        for us, c, label in top_kernels(group, top):
            print(f"  {us:8.1f} {c:6.1f}  {label}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--boundary", default=r"(?i)arg_?reduce|argmax")
    p.add_argument("--top", type=int, default=14)
    args = p.parse_args()
    header, kernels, others, driver = load(args.trace)
    print(f"== {args.trace}: {header}")
    print(f"{len(kernels)} kernels, {len(others)} copies and memsets, {len(driver)} driver calls")
    busy = Busy([(k[0], k[1]) for k in kernels] + others)
    steps_of(kernels, busy, driver, re.compile(args.boundary), args.top)
    print("\n== stretches without a pause")
    bursts_of(kernels, busy, args.top)


def steps_of(kernels, busy, driver, boundary, top):
    """The decoding steps of `kernels`, summed up by kind (the module's
    doc)."""
    ends = [i for i, k in enumerate(kernels) if boundary.search(k[3])]
    if len(ends) < 3:
        print("fewer than 3 step boundaries: nothing to report")
        return
    driver_sorted = sorted(driver.values())
    driver_starts = [d[0] for d in driver_sorted]

    steps = []
    for a, b in zip(ends, ends[1:]):
        lo, hi = kernels[a][1], kernels[b][1]
        inside = kernels[a + 1 : b + 1]
        steps.append((lo, hi, inside))

    # phases: runs of steps of about one kernel count, no pause over 50 ms
    phases, current = [], []
    for s in steps:
        n, wall = len(s[2]), s[1] - s[0]
        if current:
            m = len(current[-1][2])
            if wall > 50e6 or abs(n - m) > max(3, m // 20):
                phases.append(current)
                current = []
        if wall <= 50e6:
            current.append(s)
    if current:
        phases.append(current)
    phases = [ph for ph in phases if len(ph) >= 16]

    kinds = collections.defaultdict(list)
    for ph in phases:
        kinds[round(statistics.median(len(s[2]) for s in ph))].append(ph)

    for n, group in sorted(kinds.items(), key=lambda kv: -sum(len(ph) for ph in kv[1])):
        all_steps = [s for ph in group for s in ph[1:]]  # each phase's first step left out
        if not all_steps:
            continue
        walls, busys, lags, calls, call_ns = [], [], [], [], []
        # (the idle time before the step's first kernel, and over the span
        # of its first 100 kernels: MLX's CUDA backend launches a step as
        # graphs of up to 100 nodes on an H100 or H200)
        firsts, openings = [], []
        for lo, hi, inside in all_steps:
            walls.append(hi - lo)
            busys.append(busy.within(lo, hi))
            if inside:
                firsts.append(inside[0][0] - lo)
                edge = inside[min(len(inside), 100) - 1][1]
                openings.append(edge - lo - busy.within(lo, edge))
            step_lags = []
            for k in inside:
                d = driver.get(k[2])
                if d:
                    step_lags.append(k[0] - d[1])
            if step_lags:
                lags.append(statistics.median(step_lags))
            in_step = driver_sorted[bisect.bisect_left(driver_starts, lo) : bisect.bisect_left(driver_starts, hi)]
            calls.append(len(in_step))
            call_ns.append(sum(d[1] - d[0] for d in in_step))
        med = lambda xs: statistics.median(xs) / 1e3 if xs else float("nan")
        print(f"\n-- {len(group)} phases, {len(all_steps)} steps of about {n} kernels")
        print(f"wall {med(walls):.1f} µs, busy {med(busys):.1f} µs, idle {med(walls) - med(busys):.1f} µs "
              f"(before the first kernel {med(firsts):.1f} µs, over the first 100 kernels {med(openings):.1f} µs)")
        if driver:
            print(f"launch-to-start lag {med(lags):.1f} µs; driver calls a step "
                  f"{statistics.median(calls):.0f}, their host time {med(call_ns):.1f} µs")
        total = sum(k[1] - k[0] for s in all_steps for k in s[2]) / len(all_steps) / 1e3
        print(f"kernel time a step {total:.1f} µs; by name (µs a step, count a step):")
        for us, c, label in top_kernels([s[2] for s in all_steps], top):
            print(f"  {us:8.1f} {c:6.1f}  {label}")


if __name__ == "__main__":
    main()
