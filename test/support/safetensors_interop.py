"""Python side of ExMLX's safetensors interop tests (test/ex_mlx/wire_test.exs).

  python3 safetensors_interop.py read PATH
      Loads PATH with the safetensors package (its strict Rust parser, and
      numpy's loader for every dtype numpy has) and prints one line per
      tensor: NAME DTYPE SHAPE HEX-OF-DATA.
  python3 safetensors_interop.py write PATH
      Writes PATH with safetensors: every dtype it knows, arange values.
"""
import sys

import numpy as np
import safetensors
import safetensors.numpy as stnp

NUMPY = {
    "BOOL": np.bool_, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64,
    "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
    "F16": np.float16, "F32": np.float32, "F64": np.float64, "C64": np.complex64,
}


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    tensors = dict(safetensors.deserialize(raw))
    by_numpy = stnp.load_file(path) if all(t["dtype"].upper() in NUMPY or t["dtype"] in ("bool",) for t in tensors.values()) else {}
    for name in sorted(tensors):
        t = tensors[name]
        data = bytes(t["data"])
        dtype = t["dtype"]
        if name in by_numpy:
            # numpy's loader must see the same bytes
            assert by_numpy[name].tobytes() == data, name
            assert list(by_numpy[name].shape) == list(t["shape"]), name
        shape = "x".join(str(d) for d in t["shape"]) or "scalar"
        print(name, dtype, shape, data.hex())


def write(path):
    tensors = {}
    for name, dt in NUMPY.items():
        if name == "BOOL":
            tensors[name] = np.array([True, False, True, True, False, False]).reshape(2, 3)
        elif name == "C64":
            tensors[name] = (np.arange(6) + 1j * -np.arange(6)).astype(np.complex64).reshape(2, 3)
        else:
            tensors[name] = np.arange(6).astype(dt).reshape(2, 3)
    tensors["scalar_F64"] = np.array(-0.0, dtype=np.float64)
    tensors["empty_F32"] = np.zeros((0, 4), dtype=np.float32)
    specs = {}
    keep = []
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        keep.append(arr)
        dtype = {"C64": "complex64", "BOOL": "bool"}.get(name, None) or str(arr.dtype)
        specs[name] = safetensors.TensorSpec(dtype=dtype, shape=list(arr.shape), data_ptr=arr.ctypes.data, data_len=arr.nbytes)
    # bf16: 0..5 as the top halves of f32
    bf16 = (np.arange(6, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    keep.append(bf16)
    specs["BF16"] = safetensors.TensorSpec(dtype="bfloat16", shape=[2, 3], data_ptr=bf16.ctypes.data, data_len=bf16.nbytes)
    safetensors.serialize_file(specs, path, metadata={"written_by": "python"})


if __name__ == "__main__":
    {"read": read, "write": write}[sys.argv[1]](sys.argv[2])
