//! The timing rules of every scenario, run in virtual time: a simulated SUT
//! answers each sample at a virtual time of its model, the issuing loop waits
//! on a `VirtualClock`, and a ten-second run takes milliseconds and does the
//! same thing every time, however loaded the machine.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use loadgen_engine::clock::{Clock, VirtualClock};
use loadgen_engine::live::LiveStats;
use loadgen_engine::null_sut::SizedQsl;
use loadgen_engine::runner::{start_test_with_clock, LogSettings, TestOutcome};
use loadgen_engine::sut::SutError;
use loadgen_engine::{
    Completer, QuerySample, QuerySampleResponse, Scenario, SystemUnderTest, TestMode, TestSettings,
};
use serde_json::Value;

/// How long the simulated SUT takes.
enum Model {
    /// Every sample answers this many ns after it was issued.
    Fixed(i64),
    /// One server: samples queue and each takes this many ns.
    Queue(i64),
    /// The k-th sample issued answers `latencies[k % len]` ns after its issue.
    Cycle(Vec<i64>),
}

struct SimSut {
    clock: Arc<VirtualClock>,
    model: Model,
    busy_until: AtomicU64,
    /// Samples issued so far (for `Model::Cycle`).
    issued: AtomicU64,
    /// Virtual time an `issue_query` call takes (to make queries overdue).
    issue_cost_ns: i64,
    /// (virtual time, samples) of every issue_query call.
    calls: Mutex<Vec<(i64, usize)>>,
}

impl SimSut {
    fn new(clock: &Arc<VirtualClock>, model: Model) -> Self {
        Self {
            clock: clock.clone(),
            model,
            busy_until: AtomicU64::new(0),
            issued: AtomicU64::new(0),
            issue_cost_ns: 0,
            calls: Mutex::new(Vec::new()),
        }
    }

    fn answer_time(&self, now: i64) -> i64 {
        let k = self.issued.fetch_add(1, Ordering::Relaxed) as usize;
        match &self.model {
            Model::Fixed(l) => now + l,
            Model::Cycle(latencies) => now + latencies[k % latencies.len()],
            &Model::Queue(service) => {
                let start = now.max(self.busy_until.load(Ordering::Relaxed) as i64);
                let done = start + service;
                self.busy_until.store(done as u64, Ordering::Relaxed);
                done
            }
        }
    }
}

impl SystemUnderTest for SimSut {
    fn name(&self) -> Result<String, SutError> {
        Ok("simulated SUT".into())
    }

    fn issue_query(&self, samples: &[QuerySample], completer: &Completer) {
        let now = self.clock.now_ns();
        self.calls.lock().unwrap().push((now, samples.len()));
        for s in samples {
            let (c, id) = (completer.clone(), s.id);
            self.clock.schedule(self.answer_time(now), move || {
                c.query_samples_complete(&[QuerySampleResponse::new(id, &[1, 2, 3, 4])])
            });
        }
        if self.issue_cost_ns > 0 {
            self.clock.advance(self.issue_cost_ns);
        }
    }
}

fn run(sut: &SimSut, settings: &TestSettings, name: &str) -> (TestOutcome, testkit::Scratch) {
    let dir = testkit::Scratch::new(&format!("loadgen-virtual-{name}"));
    let log = LogSettings {
        outdir: dir.to_path_buf(),
        enable_trace: false,
        ..LogSettings::default()
    };
    let qsl = SizedQsl::new(1024, 1024);
    let live = Arc::new(LiveStats::default());
    let clock: Arc<dyn Clock> = sut.clock.clone();
    let outcome =
        start_test_with_clock(sut, &qsl, settings, &log, None, live, clock).expect("the test runs");
    assert!(outcome.run_error.is_none(), "{:?}", outcome.run_error);
    (outcome, dir)
}

fn detail(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("mlperf_log_detail.txt"))
        .expect("detail log")
        .lines()
        .filter_map(|l| l.strip_prefix(":::MLLOG "))
        .map(|j| serde_json::from_str(j).expect("a JSON record"))
        .collect()
}

/// The last value logged under `key`.
fn value(dir: &Path, key: &str) -> Value {
    detail(dir)
        .into_iter()
        .rev()
        .find(|r| r["key"] == key)
        .map(|r| r["value"].clone())
        .unwrap_or_else(|| panic!("no {key} in {}", dir.display()))
}

fn int(dir: &Path, key: &str) -> i64 {
    value(dir, key)
        .as_i64()
        .unwrap_or_else(|| panic!("{key} is not an integer"))
}

/// Every string logged under `key`, in order.
fn strings(dir: &Path, key: &str) -> Vec<String> {
    detail(dir)
        .into_iter()
        .filter(|r| r["key"] == key)
        .filter_map(|r| r["value"].as_str().map(str::to_string))
        .collect()
}

fn messages(dir: &Path) -> Vec<String> {
    strings(dir, "generic_message")
}

fn settings(scenario: Scenario) -> TestSettings {
    TestSettings {
        scenario,
        mode: TestMode::PerformanceOnly,
        min_query_count: 100,
        min_duration_ms: 10_000,
        ..TestSettings::default()
    }
}

#[test]
fn server_issues_on_schedule_and_measures_exact_latencies() {
    let clock = Arc::new(VirtualClock::new());
    let sut = SimSut::new(&clock, Model::Fixed(2_000_000));
    let s = TestSettings {
        server_target_qps: 1000.0,
        server_target_latency_ns: 10_000_000,
        ..settings(Scenario::Server)
    };
    let (outcome, dir) = run(&sut, &s, "server");
    assert_eq!(value(&dir, "result_validity"), "VALID");
    assert!(outcome.performance.is_some_and(|p| p.valid));
    for key in [
        "result_min_latency_ns",
        "result_max_latency_ns",
        "result_99.00_percentile_latency_ns",
    ] {
        assert_eq!(int(&dir, key), 2_000_000, "{key}");
    }
    // Issued exactly when due: the schedule's rate is the one asked for, and
    // the run lasted its minimum duration, no more.
    let calls = sut.calls.lock().unwrap().clone();
    let last = calls.last().expect("queries were issued").0;
    assert!((10_000_000_000..10_100_000_000).contains(&last), "{last}");
    let rate = calls.len() as f64 / (last as f64 / 1e9);
    assert!((950.0..1050.0).contains(&rate), "{rate}");
}

#[test]
fn server_over_its_latency_bound_is_invalid_and_says_why() {
    let clock = Arc::new(VirtualClock::new());
    let sut = SimSut::new(&clock, Model::Fixed(20_000_000));
    let s = TestSettings {
        server_target_qps: 1000.0,
        server_target_latency_ns: 10_000_000,
        ..settings(Scenario::Server)
    };
    let (_, dir) = run(&sut, &s, "server-late");
    assert_eq!(value(&dir, "result_validity"), "INVALID");
    assert_eq!(value(&dir, "result_perf_constraints_met"), false);
    assert_eq!(value(&dir, "early_stopping_met"), false);
}

#[test]
fn single_stream_issues_each_query_when_the_last_completes_until_both_minimums() {
    let clock = Arc::new(VirtualClock::new());
    let latency = 3_000_000; // 3 ms
    let sut = SimSut::new(&clock, Model::Fixed(latency));
    let s = TestSettings {
        min_duration_ms: 1_000,
        ..settings(Scenario::SingleStream)
    };
    let (_, dir) = run(&sut, &s, "single-stream");
    let calls = sut.calls.lock().unwrap().clone();
    for (k, (at, n)) in calls.iter().enumerate() {
        assert_eq!(*n, 1);
        assert_eq!(
            *at,
            k as i64 * latency,
            "query {k} is issued as query {} completes",
            k.max(1) - 1
        );
    }
    // The run stops at the first issue at or after 1 s with 100 queries.
    let expected = (1_000_000_000 + latency - 1) / latency + 1;
    assert_eq!(calls.len() as i64, expected);
    assert_eq!(int(&dir, "result_90.00_percentile_latency_ns"), latency);
    assert!(messages(&dir)
        .iter()
        .any(|m| m == "Ending naturally: Minimum query count and test duration met."));
}

#[test]
fn multi_stream_query_latency_is_that_of_its_slowest_sample() {
    let clock = Arc::new(VirtualClock::new());
    // One server, 100 us a sample: a query of 8 takes 800 us.
    let sut = SimSut::new(&clock, Model::Queue(100_000));
    let s = TestSettings {
        multi_stream_samples_per_query: 8,
        min_query_count: 700,
        min_duration_ms: 100,
        ..settings(Scenario::MultiStream)
    };
    let (_, dir) = run(&sut, &s, "multi-stream");
    let calls = sut.calls.lock().unwrap().clone();
    assert!(calls.iter().all(|&(_, n)| n == 8));
    assert_eq!(calls.len(), 700);
    assert_eq!(
        int(&dir, "result_99.00_percentile_per_query_latency_ns"),
        800_000
    );
    assert_eq!(value(&dir, "result_validity"), "VALID");
}

#[test]
fn offline_sends_one_query_and_measures_throughput_over_its_last_completion() {
    let clock = Arc::new(VirtualClock::new());
    // 10 us a sample: 100,000 samples/s.
    let sut = SimSut::new(&clock, Model::Queue(10_000));
    let s = TestSettings {
        offline_expected_qps: 200_000.0,
        min_duration_ms: 1_000,
        ..settings(Scenario::Offline)
    };
    let (_, dir) = run(&sut, &s, "offline");
    let calls = sut.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "one query");
    let samples = calls[0].1 as f64;
    assert_eq!(
        int(&dir, "result_max_latency_ns"),
        calls[0].1 as i64 * 10_000
    );
    let sps = value(&dir, "result_samples_per_second")
        .as_f64()
        .expect("a number");
    assert!(
        (sps - samples / (samples * 10_000.0 / 1e9)).abs() < 1.0,
        "{sps}"
    );
    assert_eq!(value(&dir, "result_validity"), "VALID");
}

#[test]
fn overdue_server_queries_are_coalesced_into_one_issue_call() {
    let clock = Arc::new(VirtualClock::new());
    let mut sut = SimSut::new(&clock, Model::Fixed(1_000_000));
    // Each issue call takes 5 ms at 1,000 QPS: about five queries fall due
    // during every call.
    sut.issue_cost_ns = 5_000_000;
    let s = TestSettings {
        server_target_qps: 1000.0,
        server_target_latency_ns: 100_000_000,
        server_coalesce_queries: true,
        min_duration_ms: 1_000,
        ..settings(Scenario::Server)
    };
    let (_, dir) = run(&sut, &s, "coalesce");
    let calls = sut.calls.lock().unwrap().clone();
    let samples: usize = calls.iter().map(|c| c.1).sum();
    assert!(
        calls.len() * 3 < samples,
        "{} calls for {samples} queries",
        calls.len()
    );
    // Each coalesced query keeps its own scheduled time, so latencies stay
    // those of the schedule, not of the late issue.
    assert_eq!(value(&dir, "result_validity"), "VALID");

    // Without coalescing every query is its own call.
    let clock = Arc::new(VirtualClock::new());
    let mut sut = SimSut::new(&clock, Model::Fixed(1_000_000));
    sut.issue_cost_ns = 5_000_000;
    let s = TestSettings {
        server_coalesce_queries: false,
        ..s
    };
    run(&sut, &s, "no-coalesce");
    assert!(sut.calls.lock().unwrap().iter().all(|c| c.1 == 1));
}

#[test]
fn find_peak_performance_brackets_then_bisects_to_the_sut_s_capacity() {
    let clock = Arc::new(VirtualClock::new());
    // One server, 400 us a sample: it saturates at 2,500 QPS.
    let sut = SimSut::new(&clock, Model::Queue(400_000));
    let s = TestSettings {
        mode: TestMode::FindPeakPerformance,
        server_target_qps: 1000.0,
        server_target_latency_ns: 10_000_000,
        min_duration_ms: 2_000,
        ..settings(Scenario::Server)
    };
    let (_, dir) = run(&sut, &s, "find-peak");
    let msgs = messages(&dir);
    assert!(
        msgs.iter()
            .any(|m| m == "FindPeakPerformance: Found boundaries: [2000.000000, 4000.000000)"),
        "{msgs:#?}"
    );
    let peak: f64 = msgs
        .iter()
        .find_map(|m| m.strip_prefix("FindPeakPerformance: Found peak performance field: "))
        .expect("a peak")
        .parse()
        .expect("a number");
    // Near the capacity: a finite run's Poisson arrivals can run a little
    // below their target rate, so slightly above 2,500 can still hold.
    assert!((2000.0..2625.0).contains(&peak), "{peak}");
    assert_eq!(value(&dir, "result_perf_constraints_met"), true);
}

#[test]
fn the_same_virtual_run_gives_the_same_results() {
    let results = |name: &str| {
        let clock = Arc::new(VirtualClock::new());
        let sut = SimSut::new(&clock, Model::Queue(500_000));
        let s = TestSettings {
            server_target_qps: 1500.0,
            server_target_latency_ns: 10_000_000,
            min_duration_ms: 2_000,
            ..settings(Scenario::Server)
        };
        let (_, dir) = run(&sut, &s, name);
        detail(&dir)
            .into_iter()
            .filter(|r| r["key"].as_str().is_some_and(|k| k.starts_with("result_")))
            .map(|r| (r["key"].clone(), r["value"].clone()))
            .collect::<Vec<_>>()
    };
    let (a, b) = (results("same-a"), results("same-b"));
    assert!(a.len() > 10);
    assert_eq!(a, b);
}

const NATURAL_END: &str = "Ending naturally: Minimum query count and test duration met.";

/// The invalid result of a series cut short, with the minimums it missed.
fn assert_invalid(dir: &Path, min_duration_met: bool, min_queries_met: bool) {
    assert_eq!(value(dir, "result_validity"), "INVALID");
    assert_eq!(value(dir, "result_min_duration_met"), min_duration_met);
    assert_eq!(value(dir, "result_min_queries_met"), min_queries_met);
    assert!(messages(dir).iter().all(|m| m != NATURAL_END));
}

#[test]
fn max_duration_cuts_a_series_short_and_leaves_it_invalid() {
    let clock = Arc::new(VirtualClock::new());
    let latency = 3_000_000;
    let sut = SimSut::new(&clock, Model::Fixed(latency));
    let max_ns = 100_000_000;
    let s = TestSettings {
        min_query_count: 100_000,
        max_duration_ms: (max_ns / 1_000_000) as u64,
        ..settings(Scenario::SingleStream)
    };
    let (outcome, dir) = run(&sut, &s, "max-duration");
    // Query k is issued at k * latency; the rule holds after the first issue
    // later than the maximum.
    let last = max_ns / latency + 1;
    assert_eq!(sut.calls.lock().unwrap().len() as i64, last + 1);
    assert_eq!(
        strings(&dir, "error_runtime"),
        [format!(
            "IssueQueryThread 0 Ending early: Max test duration reached. duration_ns {}",
            last * latency
        )]
    );
    assert_eq!(int(&dir, "result_query_count"), last + 1);
    assert_invalid(&dir, false, false);
    assert_eq!(outcome.errors, 1);
    assert!(outcome.performance.is_some_and(|p| !p.valid));
}

#[test]
fn max_query_count_cuts_a_series_short_and_leaves_it_invalid() {
    let clock = Arc::new(VirtualClock::new());
    let sut = SimSut::new(&clock, Model::Fixed(1_000_000));
    let s = TestSettings {
        min_query_count: 1_000,
        max_query_count: 50,
        ..settings(Scenario::SingleStream)
    };
    let (_, dir) = run(&sut, &s, "max-query-count");
    assert_eq!(sut.calls.lock().unwrap().len(), 50);
    assert_eq!(
        strings(&dir, "error_runtime"),
        ["IssueQueryThread 0 Ending early: Max query count reached. query_count 50"]
    );
    assert_eq!(int(&dir, "result_query_count"), 50);
    assert_invalid(&dir, false, false);
}

#[test]
fn server_stops_when_too_many_queries_are_outstanding() {
    let clock = Arc::new(VirtualClock::new());
    // Nothing is answered for a second while queries arrive every
    // millisecond or so: the eleventh is one too many.
    let sut = SimSut::new(&clock, Model::Fixed(1_000_000_000));
    let s = TestSettings {
        server_target_qps: 1000.0,
        server_target_latency_ns: 10_000_000,
        server_max_async_queries: 10,
        ..settings(Scenario::Server)
    };
    let (_, dir) = run(&sut, &s, "max-async");
    assert_eq!(sut.calls.lock().unwrap().len(), 11);
    assert_eq!(
        strings(&dir, "error_runtime"),
        ["IssueQueryThread 0 Ending early: Too many outstanding queries. issued 11 outstanding 11"]
    );
    assert_eq!(int(&dir, "result_query_count"), 11);
    // The series still waits for and measures every answer.
    assert_eq!(int(&dir, "result_min_latency_ns"), 1_000_000_000);
    assert_eq!(int(&dir, "result_max_latency_ns"), 1_000_000_000);
    assert_invalid(&dir, false, false);

    // A SUT that keeps up never has ten queries outstanding.
    let clock = Arc::new(VirtualClock::new());
    let sut = SimSut::new(&clock, Model::Fixed(500_000));
    let s = TestSettings {
        min_duration_ms: 1_000,
        ..s
    };
    let (_, dir) = run(&sut, &s, "max-async-kept-up");
    assert!(strings(&dir, "error_runtime").is_empty());
    assert_eq!(value(&dir, "result_validity"), "VALID");
}

#[test]
fn a_series_that_runs_out_of_generated_queries_says_so_and_is_invalid() {
    let clock = Arc::new(VirtualClock::new());
    // Expected at 10 ms a query, answered in 1 ms: the queries generated for
    // twice the minimum duration at the expected rate are all issued long
    // before the minimum duration.
    let sut = SimSut::new(&clock, Model::Fixed(1_000_000));
    let s = TestSettings {
        single_stream_expected_latency_ns: 10_000_000.0,
        min_duration_ms: 1_000,
        ..settings(Scenario::SingleStream)
    };
    let (_, dir) = run(&sut, &s, "ran-out");
    // Queries due at 0, 10, ..., 2000 ms: the one due at twice the duration
    // is still generated.
    let generated = 2 * 1_000 / 10 + 1;
    assert_eq!(int(&dir, "generated_query_count"), generated);
    assert_eq!(sut.calls.lock().unwrap().len() as i64, generated);
    assert_eq!(int(&dir, "result_query_count"), generated);
    assert_eq!(
        strings(&dir, "error_runtime"),
        ["Ending early: Ran out of generated queries to issue before the minimum query count and test duration were reached. Please update the relevant expected latency or target qps in the TestSettings so they are more accurate."]
    );
    assert_invalid(&dir, false, true);
}

/// The probability of at most `t` failures in `n` trials that each pass
/// with probability `p`.
fn at_most_failures(n: i64, t: i64, p: f64) -> f64 {
    let q = 1.0 - p;
    let mut term = p.powi(n as i32);
    let mut sum = term;
    for f in 0..t.min(n) {
        term *= (n - f) as f64 / (f + 1) as f64 * q / p;
        sum += term;
    }
    sum
}

/// The fewest passing queries that, beside `t` failing ones, show with 99%
/// confidence that the `p` percentile holds: if it held only just, that many
/// passes against `t` failures would come by chance under 1% of the time.
fn min_passing(t: i64, p: f64) -> i64 {
    (1..)
        .find(|&h| at_most_failures(h + t, t, p) < 0.01)
        .expect("a finite count")
}

/// The early-stopping estimate of the `p` percentile over the ascending
/// `sorted` latencies of as many queries: `(discarded, estimate)`, where the
/// `t - 1` highest are discarded for the largest `t` failures the query count
/// covers; `None` when there are too few queries for any.
fn expected_estimate(sorted: &[i64], p: f64) -> Option<(i64, i64)> {
    let n = sorted.len() as i64;
    let t = (1..=n).take_while(|&t| min_passing(t, p) + t <= n).last()?;
    Some((t - 1, sorted[(n - t) as usize]))
}

#[test]
fn single_stream_early_stopping_needs_enough_queries_and_estimates_conservatively() {
    // 1000 distinct latencies, 100 ns to 100 us (kept exactly by the
    // histogram), in a scrambled order.
    let latencies: Vec<i64> = (0..1000).map(|k| (k * 37 % 1000 + 1) * 100).collect();
    let p = 0.9;
    let need = min_passing(1, p) + 1;
    assert_eq!(need, 64, "the known minimum for the 90th percentile");
    for n in [need - 1, need, 1000] {
        let clock = Arc::new(VirtualClock::new());
        let sut = SimSut::new(&clock, Model::Cycle(latencies.clone()));
        let s = TestSettings {
            min_query_count: n as u64,
            min_duration_ms: 0,
            ..settings(Scenario::SingleStream)
        };
        let (_, dir) = run(&sut, &s, &format!("early-stopping-{n}"));
        assert_eq!(int(&dir, "result_query_count"), n);
        assert_eq!(value(&dir, "result_min_queries_met"), true);
        assert_eq!(value(&dir, "result_min_duration_met"), true);
        let mut sorted = latencies[..n as usize].to_vec();
        sorted.sort_unstable();
        let text = strings(&dir, "early_stopping_result").concat();
        let Some((discarded, estimate)) = expected_estimate(&sorted, p) else {
            assert_eq!(n, need - 1);
            assert_eq!(value(&dir, "early_stopping_met"), false);
            assert_eq!(value(&dir, "result_validity"), "INVALID");
            assert_eq!(
                text,
                format!(
                    " * Only processed {n} queries.  * Need to process at least {need} queries for early stopping."
                )
            );
            continue;
        };
        assert_eq!(value(&dir, "early_stopping_met"), true, "{n} queries");
        assert_eq!(value(&dir, "result_validity"), "VALID");
        assert_eq!(int(&dir, "early_stopping_latency_ss"), estimate);
        assert!(
            text.starts_with(&format!(
                " * Processed at least {need} queries ({n}).  * Would discard {discarded} highest latency queries.  * Early stopping 90.0th percentile estimate: {estimate}"
            )),
            "{text}"
        );
        // The estimate allows for the sampling: above the plain percentile.
        assert!(estimate > int(&dir, "result_90.00_percentile_latency_ns"));
        match expected_estimate(&sorted, 0.99) {
            Some((_, e99)) => {
                assert_eq!(int(&dir, "early_stopping_latency_ms"), e99);
                assert!(text.ends_with(&format!(
                    "  * Early stopping 99.0th percentile estimate: {e99}"
                )));
            }
            None => assert!(text.contains("Not enough queries processed for 99.0th percentile")),
        }
    }
}

#[test]
fn the_latency_side_file_holds_every_sample_of_each_series_and_no_log_changes() {
    use loadgen_engine::latency_file::{self, LatencyFileSettings, SeriesKind};
    // SubmissionRun: an accuracy series, then the performance one; a queue
    // whose latencies the side file must give back exactly.
    let s = TestSettings {
        mode: TestMode::SubmissionRun,
        server_target_qps: 500.0,
        server_target_latency_ns: 50_000_000,
        min_duration_ms: 1_000,
        ..settings(Scenario::Server)
    };
    let plain_dir = {
        let clock = Arc::new(VirtualClock::new());
        run(
            &SimSut::new(&clock, Model::Queue(1_500_000)),
            &s,
            "side-off",
        )
        .1
    };
    let dir = testkit::Scratch::new("loadgen-virtual-side");
    let side = dir.join(latency_file::FILE);
    let log = LogSettings {
        outdir: dir.to_path_buf(),
        enable_trace: false,
        latency_file: Some(LatencyFileSettings {
            path: side.clone(),
            benchmark: "resnet50".into(),
        }),
        ..LogSettings::default()
    };
    let clock = Arc::new(VirtualClock::new());
    let sut = SimSut::new(&clock, Model::Queue(1_500_000));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let live = Arc::new(LiveStats::default());
    let outcome = start_test_with_clock(
        &sut,
        &SizedQsl::new(1024, 1024),
        &s,
        &log,
        None,
        live,
        dyn_clock,
    )
    .expect("the test runs");
    assert_eq!(outcome.latency_file_error, None);

    let f = latency_file::read(&side).expect("the side file reads back");
    assert_eq!(f.benchmark, "resnet50");
    assert_eq!(f.series.len(), 2);
    assert_eq!(f.series[0].kind, SeriesKind::Accuracy);
    assert_eq!(f.series[0].samples.len(), 1024);
    let perf = f.performance().expect("a performance series");
    assert_eq!(perf.scenario, Scenario::Server);
    assert_eq!(perf.samples.len() as i64, int(&dir, "result_query_count"));
    let mut lat: Vec<i64> = perf.samples.iter().map(|r| r.latency_ns).collect();
    lat.sort_unstable();
    assert_eq!(lat[0], int(&dir, "result_min_latency_ns"));
    assert_eq!(*lat.last().unwrap(), int(&dir, "result_max_latency_ns"));
    // The logged percentile is the histogram's: at most 2^-16 below.
    let p99 = lat[(lat.len() as f64 * 0.99).ceil() as usize - 1];
    let logged = int(&dir, "result_99.00_percentile_latency_ns");
    assert!(logged <= p99 && p99 - logged <= p99 >> 16, "{logged} {p99}");

    // The four MLPerf logs hold the same records with the side file or without.
    let records = |d: &Path| -> Vec<(Value, Value)> {
        detail(d)
            .into_iter()
            .filter(|r| {
                r["key"] != "test_datetime" && !r["key"].as_str().unwrap().starts_with("power_")
            })
            .map(|r| (r["key"].clone(), r["value"].clone()))
            .collect()
    };
    assert_eq!(records(&dir), records(&plain_dir));
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "mlperf_log_accuracy.json",
            "mlperf_log_detail.txt",
            "mlperf_log_summary.txt",
            "mlperf_log_trace.json",
            latency_file::FILE
        ]
    );
    let _ = std::fs::remove_dir_all(&plain_dir);
}
