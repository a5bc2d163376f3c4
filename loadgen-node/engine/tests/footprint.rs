//! The footprint worked out before a test bounds what the test then loads,
//! issues and writes: runs of the null SUT in every mode that logs, their
//! accuracy-log entries counted exactly where every generated query is
//! issued (Offline, Server), and their log files no larger than the
//! estimate (nor much smaller: an estimate twice too large would refuse
//! runs that fit).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use loadgen_engine::footprint::{Footprint, SampleBytes, OTHER_LOG_BYTES};
use loadgen_engine::null_sut::{NullAnswer, NullSut, SizedQsl};
use loadgen_engine::runner::{start_test, LogSettings};
use loadgen_engine::{EffectiveSettings, Scenario, TestMode, TestSettings};

const TOTAL: usize = 1000;
const PERFORMANCE: usize = 256;

fn settings(scenario: Scenario, mode: TestMode) -> TestSettings {
    TestSettings {
        scenario,
        mode,
        min_duration_ms: 300,
        min_query_count: 1,
        offline_expected_qps: 2000.0,
        server_target_qps: 2000.0,
        single_stream_expected_latency_ns: 200_000.0,
        multi_stream_expected_latency_ns: 400_000.0,
        accuracy_log_rng_seed: 720_381_539_243_781_796,
        ..TestSettings::default()
    }
}

fn size(dir: &std::path::Path, name: &str) -> u64 {
    std::fs::metadata(dir.join(name)).map_or(0, |m| m.len())
}

#[test]
fn the_footprint_bounds_what_a_test_loads_issues_and_writes() {
    let sampled = |mut s: TestSettings| {
        s.accuracy_log_sampling_target = 100;
        s
    };
    let tokens = |mut s: TestSettings| {
        s.use_token_latencies = true;
        s
    };
    let cases: Vec<(&str, TestSettings, bool, NullAnswer)> = vec![
        (
            "offline-accuracy",
            settings(Scenario::Offline, TestMode::AccuracyOnly),
            true,
            NullAnswer::Index,
        ),
        (
            "offline-sampled",
            sampled(settings(Scenario::Offline, TestMode::PerformanceOnly)),
            true,
            NullAnswer::Index,
        ),
        (
            "server-sampled",
            sampled(settings(Scenario::Server, TestMode::PerformanceOnly)),
            true,
            NullAnswer::Index,
        ),
        (
            "server-submission",
            sampled(settings(Scenario::Server, TestMode::SubmissionRun)),
            true,
            NullAnswer::Index,
        ),
        (
            "singlestream-tokens",
            tokens(settings(Scenario::SingleStream, TestMode::AccuracyOnly)),
            false,
            NullAnswer::Tokens,
        ),
        (
            "multistream-sampled",
            sampled(settings(Scenario::MultiStream, TestMode::PerformanceOnly)),
            false,
            NullAnswer::Index,
        ),
    ];
    for (name, s, all_issued, answer) in cases {
        let dir = testkit::Scratch::new(&format!("loadgen-footprint-{name}"));
        let logs = LogSettings {
            outdir: dir.to_path_buf(),
            ..LogSettings::default()
        };
        let (eff, _) = EffectiveSettings::derive(&s, TOTAL, PERFORMANCE);
        let fp = Footprint::of(&eff, TOTAL, SampleBytes::Each(10));
        let outcome = start_test(
            &NullSut::new("null", answer),
            &SizedQsl::new(TOTAL, PERFORMANCE),
            &s,
            &logs,
            None,
        )
        .unwrap();
        assert!(
            outcome.run_error.is_none(),
            "{name}: {:?}",
            outcome.run_error
        );

        assert_eq!(fp.loaded_samples, PERFORMANCE as u64, "{name}");
        assert_eq!(fp.loaded_bytes, 10 * PERFORMANCE as u64, "{name}");
        let logged = outcome.accuracy_entries;
        match all_issued {
            true => assert_eq!(logged, fp.logged_samples, "{name}"),
            false => assert!(logged <= fp.logged_samples, "{name}: {logged}"),
        }
        assert!(logged > 0, "{name}: the case logs something");

        // Answers of the null SUT: 4 bytes, or up to 8 tokens of 4.
        let answer_bytes = match answer {
            NullAnswer::Index => 4,
            NullAnswer::Tokens => 32,
        };
        let est = fp.log_bytes(&eff, answer_bytes, true);
        let accuracy = size(&dir, "mlperf_log_accuracy.json");
        let trace = size(&dir, "mlperf_log_trace.json");
        let others = size(&dir, "mlperf_log_detail.txt") + size(&dir, "mlperf_log_summary.txt");
        assert!(
            accuracy <= est.accuracy && est.accuracy <= 2 * accuracy + 1024,
            "{name}: accuracy log {accuracy}, estimated {}",
            est.accuracy
        );
        assert!(
            trace <= est.trace && est.trace <= 2 * trace + (64 << 10),
            "{name}: trace {trace}, estimated {}",
            est.trace
        );
        assert!(others <= OTHER_LOG_BYTES, "{name}: {others}");
        assert_eq!(fp.log_bytes(&eff, answer_bytes, false).trace, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn the_loaded_set_is_the_largest_one_held_at_once() {
    // Accuracy sets of 256 out of 1000 samples, sized by index: the largest
    // set's bytes, not all of them.
    let s = settings(Scenario::Offline, TestMode::AccuracyOnly);
    let (eff, _) = EffectiveSettings::derive(&s, TOTAL, PERFORMANCE);
    let by_index = |i: usize| i as u64;
    let fp = Footprint::of(&eff, TOTAL, SampleBytes::ByIndex(&by_index));
    assert_eq!(fp.loaded_samples, 256);
    let all: u64 = (0..TOTAL as u64).sum();
    assert!(
        fp.loaded_bytes < all && fp.loaded_bytes > 256 * 400,
        "{}",
        fp.loaded_bytes
    );
    // The whole data set held at once (dlrm-v3's rule): all of it.
    let (eff, _) = EffectiveSettings::derive(&s, TOTAL, TOTAL);
    assert_eq!(
        Footprint::of(&eff, TOTAL, SampleBytes::ByIndex(&by_index)).loaded_bytes,
        all
    );
    // Memory: the loaded bytes and 128 bytes per planned sample.
    let fp = Footprint::of(&eff, TOTAL, SampleBytes::Each(100));
    assert_eq!(
        fp.memory_bytes(),
        100 * TOTAL as u64 + 128 * fp.planned_samples
    );
}
