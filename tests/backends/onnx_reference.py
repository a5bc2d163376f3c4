"""Python onnxruntime on the same model and inputs as sut-node's onnx backend:
the reference the ignored tests and the bench compare against. Run it with
the venv of tests/backends/setup-onnx.sh ($MLPN_ONNX_PYTHON).

  infer MODEL DIR           outputs of every .npy in DIR (name order), as JSON
                            on stdout: [{"file", "output": [floats]}, ...]
  fixed-batch MODEL OUT N   OUT: MODEL with its batch dimension fixed to N
  bench MODEL BATCH SECONDS [THREADS [SAMPLE.npy]]
                            samples/s of session.run on batches of BATCH
                            copies of SAMPLE.npy (default: random samples), and
                            the process's CPU time per sample, as JSON on stdout
"""

import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort


def session(model, threads=0):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def infer(model, data_dir):
    sess = session(model)
    name = sess.get_inputs()[0].name
    files = sorted(f for f in os.listdir(data_dir) if f.endswith(".npy"))
    out = []
    for f in files:
        x = np.load(os.path.join(data_dir, f))
        y = sess.run(None, {name: x[np.newaxis, ...]})[0]
        out.append({"file": f, "output": y[0].astype(np.float64).ravel().tolist()})
    json.dump(out, sys.stdout)


def fixed_batch(model, out, n):
    import onnx

    m = onnx.load(model)
    for value in list(m.graph.input) + list(m.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_value = n
    onnx.save(m, out)


def bench(model, batch, seconds, threads=0, sample=None):
    sess = session(model, threads)
    inp = sess.get_inputs()[0]
    if sample:
        x = np.ascontiguousarray(np.repeat(np.load(sample)[np.newaxis, ...], batch, axis=0))
    else:
        shape = [batch] + [int(d) for d in inp.shape[1:]]
        x = np.random.default_rng(0).uniform(-120, 120, shape).astype(np.float32)
    for _ in range(2):
        sess.run(None, {inp.name: x})
    runs, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while True:
        sess.run(None, {inp.name: x})
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and runs >= 3:
            break
    cpu = time.process_time() - cpu_start
    json.dump({"batch": batch, "runs": runs, "seconds": elapsed,
               "samples_per_s": runs * batch / elapsed,
               "cpu_ms_per_sample": cpu * 1000 / (runs * batch)}, sys.stdout)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "infer":
        infer(*args)
    elif cmd == "fixed-batch":
        fixed_batch(args[0], args[1], int(args[2]))
    elif cmd == "bench":
        threads = int(args[3]) if len(args) > 3 else 0
        bench(args[0], int(args[1]), float(args[2]), threads, args[4] if len(args) > 4 else None)
    else:
        sys.exit(f"unknown command {cmd}")
