#!/usr/bin/env python3
"""Runs the official MLPerf LoadGen (PyPI `mlcommons-loadgen`) against a null SUT.

The SUT completes every sample inside issue_queries, with one
QuerySamplesComplete call per query; each response carries the sample's QSL
index as 4 little-endian bytes, as loadgen-node's null SUT does. The results
are read from mlperf_log_detail.txt in --output-dir.

By default the SUT uses ConstructFastSUT, the binding that hands the queries
over as plain int lists: on a null SUT it is about twice as fast as
ConstructSUT, so the official LoadGen is measured at its best.
"""

import argparse
import array
import os
import sys

import mlperf_loadgen as lg

SCENARIOS = {
    "SingleStream": lg.TestScenario.SingleStream,
    "MultiStream": lg.TestScenario.MultiStream,
    "Server": lg.TestScenario.Server,
    "Offline": lg.TestScenario.Offline,
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--scenario", choices=SCENARIOS, required=True)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--total-sample-count", type=int, default=1024)
    p.add_argument("--performance-sample-count", type=int, default=1024)
    p.add_argument("--min-duration-ms", type=int, default=1000)
    p.add_argument("--max-duration-ms", type=int, default=0)
    p.add_argument("--min-query-count", type=int, default=100)
    p.add_argument("--max-query-count", type=int, default=0)
    p.add_argument("--server-target-qps", type=float, default=1.0)
    p.add_argument("--server-target-latency-ns", type=int, default=100_000_000)
    p.add_argument("--server-target-latency-percentile", type=float, default=0.99)
    p.add_argument("--offline-expected-qps", type=float, default=1.0)
    p.add_argument("--single-stream-expected-latency-ns", type=int, default=1_000_000)
    p.add_argument("--qsl-rng-seed", type=int, default=0)
    p.add_argument("--sample-index-rng-seed", type=int, default=0)
    p.add_argument("--schedule-rng-seed", type=int, default=0)
    p.add_argument("--enable-trace", action="store_true")
    p.add_argument(
        "--sut-api",
        choices=("fast", "plain"),
        default="fast",
        help="fast: ConstructFastSUT (ids and indices as int lists, the quicker "
        "binding); plain: ConstructSUT (lists of QuerySample objects)",
    )
    return p.parse_args()


def test_settings(a):
    s = lg.TestSettings()
    s.scenario = SCENARIOS[a.scenario]
    s.mode = lg.TestMode.PerformanceOnly
    s.min_duration_ms = a.min_duration_ms
    s.max_duration_ms = a.max_duration_ms
    s.min_query_count = a.min_query_count
    s.max_query_count = a.max_query_count
    s.server_target_qps = a.server_target_qps
    s.server_target_latency_ns = a.server_target_latency_ns
    s.server_target_latency_percentile = a.server_target_latency_percentile
    s.offline_expected_qps = a.offline_expected_qps
    s.single_stream_expected_latency_ns = a.single_stream_expected_latency_ns
    s.performance_sample_count_override = a.performance_sample_count
    s.qsl_rng_seed = a.qsl_rng_seed
    s.sample_index_rng_seed = a.sample_index_rng_seed
    s.schedule_rng_seed = a.schedule_rng_seed
    return s


class NullSut:
    """Answers every sample at once with its QSL index (4 bytes, little-endian).

    The answers live in one table indexed by sample, so a query costs no
    allocation besides its response objects.
    """

    def __init__(self, total_sample_count):
        self.table = array.array("I", range(total_sample_count))
        if sys.byteorder != "little":
            self.table.byteswap()
        self.base, _ = self.table.buffer_info()
        self.size = self.table.itemsize

    def issue_queries(self, ids, indices):
        base, size, response = self.base, self.size, lg.QuerySampleResponse
        lg.QuerySamplesComplete(
            [response(i, base + size * x, size) for i, x in zip(ids, indices)]
        )

    def issue_queries_plain(self, query_samples):
        self.issue_queries(
            [q.id for q in query_samples], [q.index for q in query_samples]
        )


def flush_queries():
    pass


def load_samples(_indices):
    pass


def unload_samples(_indices):
    pass


def main():
    a = parse_args()
    if array.array("I").itemsize != 4:
        sys.exit("array('I') is not 4 bytes on this platform")
    os.makedirs(a.output_dir, exist_ok=True)

    out = lg.LogOutputSettings()
    out.outdir = a.output_dir
    out.copy_summary_to_stdout = False
    log = lg.LogSettings()
    log.log_output = out
    log.enable_trace = a.enable_trace

    null = NullSut(a.total_sample_count)
    if a.sut_api == "fast":
        sut = lg.ConstructFastSUT(null.issue_queries, flush_queries)
        destroy_sut = lg.DestroyFastSUT
    else:
        sut = lg.ConstructSUT(null.issue_queries_plain, flush_queries)
        destroy_sut = lg.DestroySUT
    qsl = lg.ConstructQSL(
        a.total_sample_count, a.performance_sample_count, load_samples, unload_samples
    )
    lg.StartTestWithLogSettings(sut, qsl, test_settings(a), log)
    lg.DestroyQSL(qsl)
    destroy_sut(sut)


if __name__ == "__main__":
    main()
