"""Trains the digits classifier that MLServer serves in the KServe test.

Usage: train_digits.py MODEL_DIR DATA_DIR

MODEL_DIR gets model.joblib and model-settings.json (MLServer's sklearn
runtime, model name "digits", input FP64 [-1, 64], output the INT64 class). DATA_DIR gets the
held-out quarter of the digits: samples/NNNN.npy (float64, shape [64], one
per sample, in order: the loadgen-node dataset) and labels.npy (int64, the
true classes, outside the dataset directory).
"""

import json
import os
import sys

import joblib
import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split


def main() -> None:
    model_dir, data_dir = sys.argv[1], sys.argv[2]
    digits = load_digits()
    x = digits.data.astype(np.float64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, random_state=0, stratify=digits.target
    )
    model = LogisticRegression(max_iter=5000)
    model.fit(x_train, y_train)

    os.makedirs(model_dir, exist_ok=True)
    joblib.dump(model, os.path.join(model_dir, "model.joblib"))
    settings = {
        "name": "digits",
        "implementation": "mlserver_sklearn.SKLearnModel",
        "parameters": {"uri": "./model.joblib", "version": "v1"},
        # Declared so that the model's metadata names its input.
        "inputs": [{"name": "input-0", "datatype": "FP64", "shape": [-1, 64]}],
        "outputs": [{"name": "predict", "datatype": "INT64", "shape": [-1, 1]}],
    }
    with open(os.path.join(model_dir, "model-settings.json"), "w") as f:
        json.dump(settings, f, indent=2)

    samples = os.path.join(data_dir, "samples")
    os.makedirs(samples, exist_ok=True)
    for i, sample in enumerate(x_test):
        np.save(os.path.join(samples, f"{i:04d}.npy"), sample)
    np.save(os.path.join(data_dir, "labels.npy"), y_test.astype(np.int64))
    print(f"trained on {len(x_train)} digits, {len(x_test)} held out, "
          f"local accuracy {model.score(x_test, y_test):.4f}")


if __name__ == "__main__":
    main()
