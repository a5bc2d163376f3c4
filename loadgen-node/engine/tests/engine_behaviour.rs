//! Behaviour of whole tests, in real time, against SUTs unlike the reference
//! harness's: completions from other threads, invalid responses, a SUT that
//! dies, SubmissionRun, and the trace's JSON. The timing rules (schedules,
//! stop rules, coalescing, FindPeakPerformance) are tested in virtual time,
//! in virtual_time.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::thread::{self, JoinHandle};

use loadgen_engine::null_sut::SizedQsl;
use loadgen_engine::runner::{start_test, LogSettings, TestOutcome};
use loadgen_engine::sut::SutError;
use loadgen_engine::{
    Completer, QuerySample, QuerySampleResponse, Scenario, SystemUnderTest, TestMode, TestSettings,
};
use serde_json::Value;

fn out_dir(name: &str) -> testkit::Scratch {
    testkit::Scratch::new(&format!("loadgen-behaviour-{name}"))
}

fn run(
    sut: &dyn SystemUnderTest,
    settings: &TestSettings,
    name: &str,
    trace: bool,
) -> (TestOutcome, testkit::Scratch) {
    let dir = out_dir(name);
    let log = LogSettings {
        outdir: dir.to_path_buf(),
        enable_trace: trace,
        ..LogSettings::default()
    };
    let qsl = SizedQsl::new(256, 128);
    let outcome = start_test(sut, &qsl, settings, &log, None).expect("the test runs");
    (outcome, dir)
}

/// Every detail line must be a complete JSON record, whatever happened.
fn detail(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("mlperf_log_detail.txt"))
        .expect("detail log")
        .lines()
        .map(|l| {
            let json = l.strip_prefix(":::MLLOG ").expect("record prefix");
            serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {l}"))
        })
        .collect()
}

fn values<'a>(records: &'a [Value], key: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["key"] == key)
        .map(|r| &r["value"])
        .collect()
}

fn summary(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("mlperf_log_summary.txt")).expect("summary")
}

/// A query handed to a worker thread.
type Job = (Vec<QuerySample>, Completer);

/// Answers each query from a worker thread, after the issuing call returned.
struct ThreadedSut {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl ThreadedSut {
    fn new() -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        let worker = thread::spawn(move || {
            for (samples, completer) in rx {
                let data: Vec<[u8; 4]> = samples
                    .iter()
                    .map(|s| (s.index as u32).to_le_bytes())
                    .collect();
                let responses: Vec<_> = samples
                    .iter()
                    .zip(&data)
                    .map(|(s, d)| QuerySampleResponse::new(s.id, d))
                    .collect();
                completer.query_samples_complete(&responses);
            }
        });
        Self {
            tx: Mutex::new(Some(tx)),
            worker: Mutex::new(Some(worker)),
        }
    }
}

impl Drop for ThreadedSut {
    fn drop(&mut self) {
        self.tx.lock().unwrap().take();
        if let Some(w) = self.worker.lock().unwrap().take() {
            w.join().unwrap();
        }
    }
}

impl SystemUnderTest for ThreadedSut {
    fn name(&self) -> Result<String, SutError> {
        Ok("threaded".into())
    }
    fn report(&self) -> Vec<(String, String)> {
        vec![("sut_transport".into(), "in-process channel".into())]
    }
    fn issue_query(&self, samples: &[QuerySample], completer: &Completer) {
        if let Some(tx) = self.tx.lock().unwrap().as_ref() {
            tx.send((samples.to_vec(), completer.clone())).unwrap();
        }
    }
}

fn server(qps: f64, duration_ms: u64) -> TestSettings {
    TestSettings {
        scenario: Scenario::Server,
        server_target_qps: qps,
        min_duration_ms: duration_ms,
        min_query_count: 1,
        ..TestSettings::default()
    }
}

#[test]
fn completions_from_another_thread() {
    let sut = ThreadedSut::new();
    let (outcome, dir) = run(&sut, &server(20_000.0, 100), "threaded", true);
    assert!(outcome.run_error.is_none(), "{:?}", outcome.run_error);
    let records = detail(&dir);
    let issued = values(&records, "result_query_count")[0].as_u64().unwrap();
    assert!(issued >= 1500, "issued {issued}");
    assert!(
        summary(&dir).contains("Result is : VALID"),
        "{}",
        summary(&dir)
    );
    // What the SUT reports goes to the detail log and ends the summary.
    assert_eq!(values(&records, "sut_transport")[0], "in-process channel");
    assert!(summary(&dir).contains(
        "\nSystem under test\n================================================\nsut_transport : in-process channel\n\nNo warnings"
    ));

    // The trace is one JSON document with a complete event per sample.
    let trace: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("mlperf_log_trace.json")).unwrap())
            .expect("the trace is valid JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let samples = events
        .iter()
        .filter(|e| e["args"]["sample_seq"].is_u64())
        .count();
    assert_eq!(samples as u64, issued);
}

/// Completes every sample twice, and answers one query with a made-up id.
struct BadIdsSut {
    queries: AtomicU64,
}

impl SystemUnderTest for BadIdsSut {
    fn name(&self) -> Result<String, SutError> {
        Ok("bad ids".into())
    }
    fn issue_query(&self, samples: &[QuerySample], completer: &Completer) {
        let n = self.queries.fetch_add(1, Ordering::Relaxed);
        let data = [0u8; 4];
        for s in samples {
            completer.query_samples_complete(&[QuerySampleResponse::new(s.id, &data)]);
            if n == 3 {
                completer.query_samples_complete(&[QuerySampleResponse::new(s.id, &data)]);
                completer
                    .query_samples_complete(&[QuerySampleResponse::new(0xdead_beef_0000, &data)]);
            }
        }
    }
}

#[test]
fn duplicate_and_unknown_ids_invalidate_the_run() {
    let sut = BadIdsSut {
        queries: AtomicU64::new(0),
    };
    let settings = TestSettings {
        min_duration_ms: 0,
        min_query_count: 700,
        ..TestSettings::default()
    };
    let (outcome, dir) = run(&sut, &settings, "bad-ids", false);
    let err = outcome.run_error.expect("the run fails");
    assert!(err.contains("2 invalid responses"), "{err}");
    assert!(!outcome.performance.expect("a result").valid);
    let records = detail(&dir);
    let errors: Vec<_> = values(&records, "error_runtime")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(
        errors.iter().any(|e| e.contains("complete a sample twice")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("unknown response id")),
        "{errors:?}"
    );
    let s = summary(&dir);
    assert!(
        s.contains("Result is : INVALID") && s.contains(" * The run failed: 2 invalid responses"),
        "{s}"
    );
    assert!(
        s.ends_with("2 ERRORS encountered. See detailed log.\n"),
        "{s}"
    );
}

/// Answers the first queries, then reports that it died and answers nothing.
struct DyingSut {
    answered: AtomicU64,
}

impl SystemUnderTest for DyingSut {
    fn name(&self) -> Result<String, SutError> {
        Ok("dying".into())
    }
    fn issue_query(&self, samples: &[QuerySample], completer: &Completer) {
        if self.answered.fetch_add(1, Ordering::Relaxed) < 50 {
            let data = [0u8; 4];
            let r: Vec<_> = samples
                .iter()
                .map(|s| QuerySampleResponse::new(s.id, &data))
                .collect();
            completer.query_samples_complete(&r);
        } else {
            completer.abort("sut-node 10.0.0.7:7000 stopped answering".into());
        }
    }
}

#[test]
fn a_dead_sut_ends_the_run_promptly_and_invalid() {
    for (scenario, settings) in [
        (
            Scenario::SingleStream,
            TestSettings {
                min_duration_ms: 0,
                ..TestSettings::default()
            },
        ),
        (Scenario::Server, server(5_000.0, 60_000)),
        (
            Scenario::Offline,
            TestSettings {
                scenario: Scenario::Offline,
                min_duration_ms: 0,
                ..TestSettings::default()
            },
        ),
    ] {
        let sut = DyingSut {
            answered: AtomicU64::new(if scenario == Scenario::Offline { 50 } else { 0 }),
        };
        let (outcome, dir) = run(&sut, &settings, &format!("dying-{scenario}"), true);
        let err = outcome.run_error.expect("the run fails");
        assert!(
            err.contains("10.0.0.7:7000 stopped answering"),
            "{scenario}: {err}"
        );
        let records = detail(&dir);
        assert_eq!(
            values(&records, "result_validity")[0],
            "INVALID",
            "{scenario}"
        );
        assert_eq!(records.last().unwrap()["key"], "num_errors", "{scenario}");
        let trace = std::fs::read_to_string(dir.join("mlperf_log_trace.json")).unwrap();
        serde_json::from_str::<Value>(&trace).expect("the trace stays valid JSON");
        assert!(
            summary(&dir).contains("The run failed: Run aborted: sut-node 10.0.0.7:7000"),
            "{scenario}"
        );
    }
}

#[test]
fn submission_run_logs_every_sample_then_measures() {
    let sut = ThreadedSut::new();
    let settings = TestSettings {
        mode: TestMode::SubmissionRun,
        min_duration_ms: 0,
        min_query_count: 700,
        ..TestSettings::default()
    };
    let (outcome, dir) = run(&sut, &settings, "submission", false);
    assert!(outcome.run_error.is_none(), "{:?}", outcome.run_error);
    // Accuracy phase: each of the 256 samples once.
    assert_eq!(outcome.accuracy_entries, 256);
    let acc: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("mlperf_log_accuracy.json")).unwrap(),
    )
    .unwrap();
    let mut idx: Vec<u64> = acc
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["qsl_idx"].as_u64().unwrap())
        .collect();
    idx.sort_unstable();
    assert_eq!(idx, (0..256).collect::<Vec<_>>());
    let records = detail(&dir);
    assert_eq!(
        values(&records, "generic_message")[0],
        "Starting accuracy mode"
    );
    assert!(values(&records, "generic_message")
        .iter()
        .any(|m| *m == "Starting performance mode"));
    assert_eq!(values(&records, "result_validity")[0], "VALID");
    assert!(summary(&dir).contains("Mode     : SubmissionRun"));
}

/// Names and reports text made to look like log records of its own.
struct ForgingSut {
    inner: loadgen_engine::null_sut::NullSut,
}

const FORGED: &str = "x\", \"value\": 1}\n:::MLLOG {\"key\": \"result_validity\", \"value\": \"VALID\"}\nResult is : VALID\n\u{1b}";

impl SystemUnderTest for ForgingSut {
    fn name(&self) -> Result<String, SutError> {
        self.inner.name()
    }
    fn report(&self) -> Vec<(String, String)> {
        vec![(format!("sut_{FORGED}"), FORGED.into())]
    }
    fn issue_query(&self, samples: &[QuerySample], completer: &Completer) {
        self.inner.issue_query(samples, completer)
    }
}

#[test]
fn strings_from_the_sut_cannot_forge_log_lines() {
    let sut = ForgingSut {
        inner: loadgen_engine::null_sut::NullSut::new(
            FORGED,
            loadgen_engine::null_sut::NullAnswer::Index,
        ),
    };
    let (outcome, dir) = run(&sut, &server(2_000.0, 50), "forging", false);
    assert!(outcome.run_error.is_none(), "{:?}", outcome.run_error);
    // Every detail line parses, the name comes back intact, and only the
    // engine's own record carries a result_validity key.
    let records = detail(&dir);
    assert_eq!(values(&records, "sut_name")[0], FORGED);
    assert_eq!(values(&records, "result_validity").len(), 1);
    assert_eq!(values(&records, &format!("sut_{FORGED}"))[0], FORGED);
    let summary = summary(&dir);
    assert_eq!(summary.matches("\nResult is : ").count(), 1, "{summary}");
    assert!(summary.contains("SUT name : x\\\", \\\"value\\\": 1}\\n:::MLLOG"));
    assert!(!summary.contains('\u{1b}'));
}
