//! The timing rules of every scenario, run in virtual time: a simulated SUT
//! answers each sample at a virtual time of its model, the issuing loop waits
//! on a `VirtualClock`, and a ten-second run takes milliseconds and does the
//! same thing every time, however loaded the machine.

use std::path::{Path, PathBuf};
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
}

struct SimSut {
    clock: Arc<VirtualClock>,
    model: Model,
    busy_until: AtomicU64,
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
            issue_cost_ns: 0,
            calls: Mutex::new(Vec::new()),
        }
    }

    fn answer_time(&self, now: i64) -> i64 {
        match self.model {
            Model::Fixed(l) => now + l,
            Model::Queue(service) => {
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

fn run(sut: &SimSut, settings: &TestSettings, name: &str) -> (TestOutcome, PathBuf) {
    let dir = std::env::temp_dir().join(format!("loadgen-virtual-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let log = LogSettings {
        outdir: dir.clone(),
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

fn messages(dir: &Path) -> Vec<String> {
    detail(dir)
        .into_iter()
        .filter(|r| r["key"] == "generic_message")
        .filter_map(|r| r["value"].as_str().map(str::to_string))
        .collect()
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
