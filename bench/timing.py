"""Timing shared by the Python reference scripts of bench/."""
import statistics
import time


def timed(fun, reps, warmup=2):
    """Seconds per call of `fun`: median, p10 and p90 of `reps` calls."""
    for _ in range(warmup):
        fun()
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        fun()
        samples.append(time.perf_counter() - t)
    samples.sort()
    return {
        "median": statistics.median(samples),
        "p10": samples[max(0, int(0.1 * len(samples)))],
        "p90": samples[min(len(samples) - 1, int(0.9 * len(samples)))],
    }
