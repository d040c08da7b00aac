"""Python side of ExMLX's FFT tests (test/ex_mlx/fft_test.exs): numpy.fft's
results for the inputs the test wrote.

  python3 numpy_fft.py DIR

DIR/cases holds one case per line, tab-separated:

  ID  FUNCTION  DTYPE  SHAPE  KWARGS

FUNCTION is a name in numpy.fft (fft, rfft2, fftshift, ...); DTYPE a numpy
type string of the input's raw little-endian bytes, which are in DIR/ID.in
(row-major); SHAPE the dimensions, comma-separated (empty for rank 0);
KWARGS a Python dict literal of keyword arguments. Transforms are computed
in float64 / complex128 from the input's exact values; shifts keep the
input's type. The result goes to DIR/ID.out (little-endian, row-major) and
one line per case to stdout:

  ID  DTYPE  SHAPE

Any warning numpy gives (a deprecated argument, say) is an error.
"""
import ast
import os
import sys
import warnings

import numpy as np


def run(directory):
    warnings.simplefilter("error")
    with open(os.path.join(directory, "cases")) as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    for line in lines:
        case_id, function, dtype, shape, kwargs = line.split("\t")
        shape = tuple(int(d) for d in shape.split(",") if d)
        with open(os.path.join(directory, case_id + ".in"), "rb") as f:
            x = np.frombuffer(f.read(), dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)
        if not function.endswith("shift"):
            x = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
        y = np.asarray(getattr(np.fft, function)(x, **ast.literal_eval(kwargs)))
        y = y.astype(y.dtype.newbyteorder("<"))
        with open(os.path.join(directory, case_id + ".out"), "wb") as f:
            f.write(np.ascontiguousarray(y).tobytes())
        print(case_id, y.dtype.str.lstrip("<>|="), ",".join(str(d) for d in y.shape), sep="\t")


if __name__ == "__main__":
    run(sys.argv[1])
