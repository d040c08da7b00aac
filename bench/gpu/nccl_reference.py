"""The references of bench/gpu/nccl_probe.exs's all_sum bandwidth rows, on
the same GPUs: torch.distributed's NCCL all_reduce, and Python mlx's NCCL
backend (`mx.distributed.all_sum`, on the same CUDA libmlx as ExMLX), one
process per GPU, NVLink multicast off (NCCL_NVLS_ENABLE=0) as ExMLX's
launcher sets it.

    python3 bench/gpu/nccl_reference.py torch N
    python3 bench/gpu/nccl_reference.py mlx N      (PYTHONPATH: Python mlx)

Prints one line per size from rank 0: "REF <who> <label> <µs> <GB/s algo>
<GB/s bus>", each the median of 10 timed calls after 3 warm-ups, with f32
data of that many bytes (bus bandwidth = algorithm bandwidth · 2(n-1)/n,
NCCL's convention for all-reduce).
"""

import os
import socket
import subprocess
import sys
import time

SIZES = [(1 << 20, "1MB"), (64 << 20, "64MB"), (1 << 30, "1GB")]


def report(who, n, label, nbytes, seconds):
    algo = nbytes / seconds / 1e9
    bus = algo * 2 * (n - 1) / n
    print(f"REF {who} {label} {seconds * 1e6:.0f} {algo:.2f} {bus:.2f}", flush=True)


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def torch_rank(rank, n, port):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
    for nbytes, label in SIZES:
        x = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        samples = []
        for _ in range(10):
            started = time.perf_counter()
            dist.all_reduce(x)
            torch.cuda.synchronize()
            samples.append(time.perf_counter() - started)
        if rank == 0:
            report("torch", n, label, nbytes, median(samples))
    dist.destroy_process_group()


def mlx_rank():
    import mlx.core as mx

    group = mx.distributed.init(backend="nccl", strict=True)
    n = group.size()
    for nbytes, label in SIZES:
        x = mx.ones((nbytes // 4,), dtype=mx.float32)
        mx.eval(x)
        for _ in range(3):
            mx.eval(mx.distributed.all_sum(x))
        samples = []
        for _ in range(10):
            started = time.perf_counter()
            mx.eval(mx.distributed.all_sum(x))
            samples.append(time.perf_counter() - started)
        if group.rank() == 0:
            report("mlx", n, label, nbytes, median(samples))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    who = sys.argv[1] if len(sys.argv) > 1 else ""
    if who == "mlx-rank":
        return mlx_rank()
    n = int(sys.argv[2])
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    if who == "torch":
        import torch.multiprocessing as mp

        mp.spawn(torch_rank, args=(n, free_port()), nprocs=n, join=True)
    elif who == "mlx":
        port = str(free_port())
        ranks = []
        for rank in range(n):
            env = dict(os.environ, MLX_RANK=str(rank), MLX_WORLD_SIZE=str(n),
                       NCCL_HOST_IP="127.0.0.1", NCCL_PORT=port,
                       CUDA_VISIBLE_DEVICES=str(rank))
            ranks.append(subprocess.Popen([sys.executable, __file__, "mlx-rank"], env=env))
        sys.exit(max(p.wait() for p in ranks))
    else:
        sys.exit(f"usage: {sys.argv[0]} torch|mlx N")


if __name__ == "__main__":
    main()
