"""Accuracy of MLX's CPU float32 kernels, the ones ExMLX's CPU device uses
for transcendental ops at every size (docs/numerics.md): each op over about
5 million float32 values (a dense grid, normal draws, powers of ten, their
negatives) against NumPy's float64 function rounded once to float32. Prints,
per op, the largest distance in units in the last place and the share of
values that are not correctly rounded (erf: the largest absolute error, as
its values near zero are tiny).

    PYTHONPATH=_build/bench-python python3 bench/numerics_accuracy.py
"""
import numpy as np, mlx.core as mx, math
mx.set_default_device(mx.cpu)
rng = np.random.default_rng(7)
x = np.concatenate([np.linspace(-20, 20, 2_000_001, dtype=np.float32),
                    (rng.standard_normal(500_000) * 10).astype(np.float32),
                    np.float32(10.0) ** rng.uniform(-30, 1.9, 200_000).astype(np.float32)])
x = np.concatenate([x, -x])
def ulps(a, b):
    a = a.view(np.int32).astype(np.int64); b = b.view(np.int32).astype(np.int64)
    a = np.where(a < 0, -(a & 0x7fffffff), a); b = np.where(b < 0, -(b & 0x7fffffff), b)
    return np.abs(a - b)

verf = np.vectorize(math.erf)
cases = {
 "exp": (mx.exp, np.exp, (-87, 88)), "expm1": (mx.expm1, np.expm1, (-87, 88)),
 "log": (mx.log, np.log, (1e-30, 1e30)), "log1p": (mx.log1p, np.log1p, (-0.999, 1e30)),
 "sin": (mx.sin, np.sin, (-20, 20)), "cos": (mx.cos, np.cos, (-20, 20)), "tan": (mx.tan, np.tan, (-1.5, 1.5)),
 "tanh": (mx.tanh, np.tanh, (-20, 20)), "sigmoid": (mx.sigmoid, lambda v: 1/(1+np.exp(-v)), (-87, 87)),
 "erf": (mx.erf, verf, (-6, 6)), "sqrt": (mx.sqrt, np.sqrt, (0, 1e30)), "rsqrt": (mx.rsqrt, lambda v: 1/np.sqrt(v), (1e-30, 1e30)),
 "sinh": (mx.sinh, np.sinh, (-80, 80)), "cosh": (mx.cosh, np.cosh, (-80, 80)), "atan": (mx.arctan, np.arctan, (-1e30, 1e30)),
}
for name, (f, ref, (lo, hi)) in cases.items():
    v = x[(x >= lo) & (x <= hi)]
    got = np.array(f(mx.array(v)))
    want = ref(v.astype(np.float64)).astype(np.float32)
    ok = np.isfinite(want) & (np.abs(want) > 1e-37)
    u = ulps(got[ok], want[ok])
    if name == "erf":
        print(f"{name}: max abs err {np.max(np.abs(got.astype(np.float64)-ref(v.astype(np.float64)))):.2e}; max {u.max()} ulp, {np.mean(u>0)*100:.2f}% not correctly rounded, over {ok.sum()} values")
    else:
        print(f"{name}: max {u.max()} ulp, {np.mean(u>0)*100:.2f}% not correctly rounded, over {ok.sum()} values in [{lo}, {hi}]")
print("mlx", mx.__version__)
