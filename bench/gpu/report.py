"""Turns the lines of bench/gpu/bench.exs and bench/gpu/reference.py (several
rounds, any order) into a Markdown table: per row the median of each
implementation's rounds, and ExMLX's ratio to Python mlx and to PyTorch.

    python3 bench/gpu/report.py GPU_NAME ROUNDS FILE... > gpu.md
"""
import statistics
import sys

gpu, rounds, files = sys.argv[1], sys.argv[2], sys.argv[3:]
values, units, order = {}, {}, []
for path in files:
    with open(path) as f:
        for line in f:
            impl, name, unit, value = line.rstrip("\n").split("\t")
            if name not in units:
                order.append(name)
            units[name] = unit
            values.setdefault((impl, name), []).append(float(value))


def cell(impl, name):
    v = values.get((impl, name))
    return None if v is None else statistics.median(v)


def fmt(v):
    if v is None:
        return "—"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


print(f"## GPU: {gpu} (medians over {rounds} alternating rounds)\n")
print("Throughput rows (TFLOP/s, GB/s): higher is better, ratio > 1 means ExMLX is faster.")
print("Time rows (µs): lower is better, ratio < 1 means ExMLX is faster.\n")
print("| | unit | ExMLX | Python mlx | PyTorch | ExMLX / Python mlx | ExMLX / PyTorch |")
print("|---|---|---:|---:|---:|---:|---:|")
for name in order:
    ours, mlx, torch = (cell(i, name) for i in ("exmlx", "mlx", "torch"))
    r_mlx = f"{ours / mlx:.2f}×" if ours and mlx else "—"
    r_torch = f"{ours / torch:.2f}×" if ours and torch else "—"
    print(f"| {name} | {units[name]} | {fmt(ours)} | {fmt(mlx)} | {fmt(torch)} | {r_mlx} | {r_torch} |")
