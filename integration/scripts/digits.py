"""Exports scikit-learn's digits data set (1,797 8x8 images, bundled in the
package: no download) to a safetensors file for the Axon training tests.

    python3 scripts/digits.py OUT.safetensors

Tensors: train_images f32 {1437, 64} and test_images f32 {360, 64}, pixel
values divided by 16 (0..1); train_labels and test_labels s64. Every fifth
image (index % 5 == 0) is held out: a fixed split, no random state.
"""

import sys

import numpy as np
from safetensors.numpy import save_file
from sklearn.datasets import load_digits


def main(out):
    digits = load_digits()
    images = (digits.data / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)
    test = np.arange(len(labels)) % 5 == 0
    save_file(
        {
            "train_images": np.ascontiguousarray(images[~test]),
            "train_labels": np.ascontiguousarray(labels[~test]),
            "test_images": np.ascontiguousarray(images[test]),
            "test_labels": np.ascontiguousarray(labels[test]),
        },
        out,
    )


if __name__ == "__main__":
    main(sys.argv[1])
