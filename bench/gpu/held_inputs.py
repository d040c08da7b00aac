"""How many queued ops' buffers MLX keeps alive at once, by device.

MLX allocates an op's output when it queues the op, and frees an input once
the work that read it is done. On the CPU that work is a task of 10 ops, and
an evaluation keeps at most 10 tasks queued (`DISPATCHES_PER_TASK`,
`MAX_ACTIVE_TASKS`): about a hundred ops ahead. On a CUDA GPU a task is a
CUDA graph of up to `MLX_MAX_OPS_PER_BUFFER` ops (100 on Hopper) or
`MLX_MAX_MB_PER_BUFFER` MB, whose ops' inputs are freed only once the whole
graph has run: up to a thousand ops' buffers
(docs/decisions/0025-every-pipelined-state-written-in-place.md, addendum).

This evaluates chains of matrix products of a 512 x 512 float32 matrix
(1 MiB) by the identity, each product's result the next one's only input (a
product never writes over its input, which an element-wise op may), and
prints the peak above the start in MiB: how many of the chain's results were
alive together. Once with MLX's defaults and once, in a child process, with
`MLX_MAX_OPS_PER_BUFFER=1` (MLX reads it once).

    python3 bench/gpu/held_inputs.py [--cpu]

On a staged GPU machine: `PYTHONPATH=/tmp/exmlx-gpu/mlx-cuda python3 bench/gpu/held_inputs.py`.
"""

import os
import subprocess
import sys

CHAINS = [10, 40, 200, 1000]
MIB = 1 << 20


def chain_peaks(cpu):
    import mlx.core as mx

    if cpu:
        mx.set_default_device(mx.cpu)
    peaks = []
    for steps in CHAINS:
        x = mx.random.normal((512, 512))
        eye = mx.eye(512)
        mx.eval(x, eye)
        mx.synchronize()
        mx.clear_cache()
        start = mx.get_active_memory()
        mx.reset_peak_memory()
        y = x
        for _ in range(steps):
            y = y @ eye
        mx.eval(y)
        mx.synchronize()
        peaks.append((mx.get_peak_memory() - start) / MIB)
        del x, eye, y
    return peaks


def row(peaks):
    return ", ".join(f"{p:.0f}" for p in peaks)


def main():
    cpu = "--cpu" in sys.argv
    if "--child" in sys.argv:
        print(row(chain_peaks(cpu)))
        return
    label = "CPU" if cpu else "default device"
    chains = ", ".join(map(str, CHAINS))
    print(f"chains of {chains} products of 1 MiB on the {label}: peak above the start (MiB)")
    print(f"  MLX's defaults: {row(chain_peaks(cpu))}")
    env = dict(os.environ, MLX_MAX_OPS_PER_BUFFER="1")
    child = subprocess.run(
        [sys.executable, __file__, "--child"] + (["--cpu"] if cpu else []),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    print(f"  MLX_MAX_OPS_PER_BUFFER=1: {child.stdout.strip()}")


if __name__ == "__main__":
    main()
