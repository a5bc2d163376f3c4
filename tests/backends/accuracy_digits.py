"""Top-1 accuracy of a digits run from its MLPerf accuracy log.

Usage: accuracy_digits.py mlperf_log_accuracy.json labels.npy

Each entry's data is the model's answer: the predicted class as one int64,
little endian (the "predict" output of the sklearn model). Prints
`accuracy=A samples=N` (A between 0 and 1); fails when a sample of the data
set has no entry, or an entry is not one int64.
"""

import json
import struct
import sys

import numpy as np


def main() -> None:
    with open(sys.argv[1]) as f:
        entries = json.load(f)
    labels = np.load(sys.argv[2])
    predicted = {}
    for e in entries:
        raw = bytes.fromhex(e["data"])
        if len(raw) != 8:
            sys.exit(f"sample {e['qsl_idx']}: {len(raw)} bytes, expected one int64")
        predicted[e["qsl_idx"]] = struct.unpack("<q", raw)[0]
    missing = [i for i in range(len(labels)) if i not in predicted]
    if missing:
        sys.exit(f"{len(missing)} samples have no answer, e.g. {missing[:5]}")
    correct = sum(int(predicted[i] == labels[i]) for i in range(len(labels)))
    print(f"accuracy={correct / len(labels):.4f} samples={len(labels)}")


if __name__ == "__main__":
    main()
