#!/usr/bin/env python3
"""An MLPerf Inference harness in the style of the reference implementations:
the official LoadGen (PyPI package mlcommons-loadgen) drives the mlperf-net QDL
(module mlperf_net_qdl), which sends every sample to sut-nodes over the network.

    python3 python_harness.py --sut 10.0.0.2:50051,10.0.0.3:50051 \\
        --model resnet50 --scenario Offline --mode PerformanceOnly \\
        --user-conf user.conf --output-dir out

The QSL reads .npy files (--dataset DIR, sample i is the i-th file in name
order), or makes deterministic synthetic samples (--sample-bytes). Exits 1 when
the network SUT failed during the run: its logs are then not a result.
"""

import argparse
import os
import random
import sys

import mlperf_loadgen as lg
import mlperf_net_qdl

SCENARIOS = {
    "SingleStream": lg.TestScenario.SingleStream,
    "MultiStream": lg.TestScenario.MultiStream,
    "Server": lg.TestScenario.Server,
    "Offline": lg.TestScenario.Offline,
}
MODES = {
    "PerformanceOnly": lg.TestMode.PerformanceOnly,
    "AccuracyOnly": lg.TestMode.AccuracyOnly,
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sut", required=True,
                   help="sut-node addresses, comma-separated (host:port, quic://host:port, ...)")
    p.add_argument("--benchmark", "--model", dest="model", default="resnet50",
                   help="the benchmark, as mlperf.conf names it (--model: its former name)")
    p.add_argument("--scenario", choices=SCENARIOS, default="Offline")
    p.add_argument("--mode", choices=MODES, default="PerformanceOnly")
    p.add_argument("--user-conf", help="user.conf (the release's mlperf.conf is always read first)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a TestSettings field, e.g. min_duration_ms=60000 (after --user-conf)")
    p.add_argument("--output-dir", default=".")
    p.add_argument("--dataset", help="directory of .npy samples (needs numpy)")
    p.add_argument("--sample-bytes", type=int, default=4096,
                   help="size of each synthetic sample (without --dataset)")
    p.add_argument("--total-sample-count", type=int, default=1024)
    p.add_argument("--performance-sample-count", type=int, default=1024)
    p.add_argument("--connections-per-node", type=int, default=None)
    p.add_argument("--dispatch", default="least-outstanding")
    p.add_argument("--input-codec", default="none")
    p.add_argument("--tls-pin", action="append", default=[],
                   help="SHA-256 fingerprint of a node's certificate (QUIC and grpcs:// nodes)")
    return p.parse_args()


def settings_from(args):
    settings = lg.TestSettings()
    if args.user_conf:
        settings.FromConfig(args.user_conf, args.model, args.scenario)
    else:
        settings.FromConfig("", args.model, args.scenario, 0)  # mlperf.conf only
    settings.scenario = SCENARIOS[args.scenario]
    settings.mode = MODES[args.mode]
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not hasattr(settings, key):
            sys.exit(f"harness: --set {item}: expected KEY=VALUE with a TestSettings field")
        kind = type(getattr(settings, key))
        try:
            if kind is bool:
                setattr(settings, key, value.lower() in ("1", "true", "yes"))
            else:
                setattr(settings, key, kind(float(value)) if kind in (int, float) else kind(value))
        except (TypeError, ValueError) as e:
            sys.exit(f"harness: --set {item}: {e}")
    return settings


class DataSet:
    """The samples, read when the LoadGen asks the QSL to load them."""

    def __init__(self, args):
        self.sample_bytes = args.sample_bytes
        self.files = None
        if args.dataset:
            self.files = sorted(os.path.join(args.dataset, f)
                                for f in os.listdir(args.dataset) if f.endswith(".npy"))
            if not self.files:
                sys.exit(f"harness: {args.dataset}: no .npy files")

    def total(self, requested):
        return len(self.files) if self.files else requested

    def read(self, index):
        if self.files:
            import numpy as np
            return np.ascontiguousarray(np.load(self.files[index]))
        return random.Random(index).randbytes(self.sample_bytes)


def main():
    args = parse_args()
    settings = settings_from(args)
    os.makedirs(args.output_dir, exist_ok=True)
    data = DataSet(args)
    total = data.total(args.total_sample_count)

    try:
        qdl = mlperf_net_qdl.Qdl(
            args.sut, model=args.model, scenario=args.scenario,
            connections_per_node=args.connections_per_node, dispatch=args.dispatch,
            input_codec=args.input_codec, tls_pin=args.tls_pin,
            mode=settings.mode)
    except (ValueError, ConnectionError) as e:
        sys.exit(f"harness: {e}")
    print(f"harness: connected to {', '.join(qdl.node_names)}", file=sys.stderr)

    # The QSL: loading stores each sample's bytes in the QDL (untimed).
    def load(indices):
        for i in indices:
            qdl.load(i, data.read(i))

    def unload(indices):
        for i in indices:
            qdl.unload(i)

    qsl = lg.ConstructQSL(total, min(total, args.performance_sample_count), load, unload)
    # The QDL variant of the SUT: Name() asks every sut-node for its name.
    sut = lg.ConstructQDL(qdl.issue_query, qdl.flush_queries, qdl.name)

    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = args.output_dir
    log_settings.log_output.copy_summary_to_stdout = False
    lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)

    qdl.finish()
    lg.DestroyQDL(sut)
    lg.DestroyQSL(qsl)

    if qdl.failure:
        print(f"harness: the network SUT failed: {qdl.failure}; the logs in "
              f"{args.output_dir} are not a result", file=sys.stderr)
        return 1
    summary = os.path.join(args.output_dir, "mlperf_log_summary.txt")
    with open(summary) as f:
        result = [line.strip() for line in f if line.startswith("Result is")]
    print(f"harness: {args.scenario} {args.mode} done"
          + (f"; {result[0]}" if result else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
