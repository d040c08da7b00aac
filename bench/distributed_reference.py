"""Reference measurements for the distributed rows of bench/suite.exs.

Two modes, each printing one JSON object as its last line:

  distributed_reference.py rank BYTES REPS
      One rank of Python mlx's ring backend (MLX_RANK and MLX_HOSTFILE set by
      ExMLX.Distributed.Launcher): seconds of `all_sum` of BYTES bytes of f32,
      each sample after a one-element all_sum that lines the ranks up. Rank 0
      prints the figures.
  distributed_reference.py tcp BYTES REPS
      A plain TCP copy of BYTES bytes over loopback (127.0.0.1), one thread
      sending and one receiving, in the same process: the floor of moving
      those bytes once.
"""
import json
import os
import socket
import sys
import threading
import time

from timing import timed

mode, size, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

if mode == "rank":
    import mlx.core as mx

    group = mx.distributed.init(strict=True, backend="ring")
    x = mx.ones((size // 4,), dtype=mx.float32)
    tiny = mx.ones((group.size(),), dtype=mx.float32)
    mx.eval(x, tiny)

    samples = []
    for i in range(reps + 2):
        mx.eval(mx.distributed.all_sum(tiny, stream=mx.cpu))
        t = time.perf_counter()
        y = mx.distributed.all_sum(x, stream=mx.cpu)
        mx.eval(y)
        if i >= 2:
            samples.append(time.perf_counter() - t)
    assert y[0].item() == group.size()
    samples.sort()
    if group.rank() == 0:
        n = len(samples)
        print(json.dumps({"mlx": mx.__version__, "median": samples[n // 2],
                          "p10": samples[int(0.1 * n)], "p90": samples[min(n - 1, int(0.9 * n))]}))
elif mode == "tcp":
    data = b"\x01" * size
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    sender = socket.create_connection(server.getsockname())
    receiver, _ = server.accept()
    for s in (sender, receiver):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = bytearray(size)

    def copy():
        thread = threading.Thread(target=sender.sendall, args=(data,))
        thread.start()
        view, got = memoryview(buffer), 0
        while got < size:
            got += receiver.recv_into(view[got:], size - got)
        thread.join()

    print(json.dumps(timed(copy, reps)))
else:
    sys.exit(f"unknown mode {mode}")
