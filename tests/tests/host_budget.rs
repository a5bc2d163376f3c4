//! What cannot work is refused at the start, with the figures: a data set
//! the host cannot hold and logs the disk cannot hold, before anything
//! connects (a single run and a submission plan); a disk that fills during
//! a run anyway ends it at once, its logs closed after whole records and
//! marked failed; and the QSL's loading shows as loading. The native
//! engine; the official one's are in official.rs. The small disks are
//! tmpfs mounts, made only as root (as in CI).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use serde_json::Value;
use tests::{
    detail_is_intact, detail_value, ends_soon, loadgen, long_server_run, refused_before_lookup,
    scratch, text, SmallDisk, SutNode,
};

#[test]
fn a_data_set_the_host_cannot_hold_is_refused_before_any_node_is_looked_up() {
    tests::no_host_holds_this_data_set("native");
}

#[test]
fn logs_no_disk_can_hold_are_refused_before_any_node_is_looked_up() {
    let out = scratch("budget-disk");
    let logs = out.join("logs");
    // A million WAN-2.2 videos of 449,740,800 bytes, logged in hex.
    let (code, err) = refused_before_lookup(&[
        "--model",
        "wan-2.2-t2v-a14b",
        "--mode",
        "AccuracyOnly",
        "--total-sample-count",
        "1000000",
        "--output-dir",
        logs.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    for part in [
        "the run's logs do not fit on the disk: they can reach 899.5 TB",
        "mlperf_log_accuracy.json 899.5 TB (1,000,000 answers of 449,740,800 bytes, in hex)",
        &format!("the filesystem of {} has", logs.display()),
        "Write them where there is room (--output-dir)",
    ] {
        assert!(err.contains(part), "{part:?} in {err}");
    }
    assert!(!logs.exists(), "nothing was written");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn logs_a_small_disk_cannot_hold_are_refused_with_both_figures() {
    let Some(disk) = SmallDisk::mount("budget-small", "16m", "the refusal on a small disk") else {
        return;
    };
    let logs = disk.path().join("logs");
    // Ten stable-diffusion-xl images of 3,145,728 bytes: 62.9 MB in hex.
    let (code, err) = refused_before_lookup(&[
        "--model",
        "stable-diffusion-xl",
        "--mode",
        "AccuracyOnly",
        "--total-sample-count",
        "10",
        "--output-dir",
        logs.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("they can reach 64.6 MB")
            && err.contains("(10 answers of 3,145,728 bytes, in hex)")
            && err.contains(&format!(
                "the filesystem of {} has 16.8 MB free",
                logs.display()
            )),
        "{err}"
    );
}

/// A plan of WAN-2.2 accuracy runs far larger than any disk: refused
/// before its first run, nothing of its tree made.
#[test]
fn a_plan_whose_logs_cannot_fit_is_refused_before_it_starts() {
    let dir = scratch("budget-plan");
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        r#"
system = "big_sut"
submitter = "MLPerfNet"
sut = "dns://nothing.invalid:50051?nodes=1"
run_flags = ["--total-sample-count", "100000"]

[[benchmark]]
model = "wan-2.2-t2v-a14b"
scenarios = ["Offline"]
"#,
    )
    .unwrap();
    let o = loadgen(&["submission", plan.to_str().unwrap(), "--no-preflight"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    for part in [
        "runs still to be made do not fit on the disk",
        "with the copies the plan keeps",
        "wan-2.2-t2v-a14b Offline accuracy 179.9 TB",
    ] {
        assert!(err.contains(part), "{part:?} in {err}");
    }
    assert!(
        !dir.join("submission").exists(),
        "nothing of the tree is made"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// On a disk that fits one accuracy log but not the full copy the plan
/// keeps of it beside the tree, the plan is refused, not its first run.
#[test]
fn the_copies_a_plan_keeps_count_against_its_disk() {
    let Some(disk) = SmallDisk::mount("budget-copies", "40m", "the plan's copies") else {
        return;
    };
    let plan = disk.path().join("plan.toml");
    std::fs::write(
        &plan,
        r#"
system = "images"
submitter = "MLPerfNet"
division = "open"
sut = "dns://nothing.invalid:50051?nodes=1"
run_flags = ["--total-sample-count", "4"]

[[benchmark]]
model = "stable-diffusion-xl"
scenarios = ["Offline"]
[benchmark.settings]
min_duration = 100
"#,
    )
    .unwrap();
    let o = loadgen(&["submission", plan.to_str().unwrap(), "--no-preflight"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("stable-diffusion-xl Offline accuracy 50.9 MB")
            && err.contains(&format!(
                "the filesystem of {} has 41.9 MB free",
                disk.path().join("submission/open/MLPerfNet").display()
            )),
        "{err}"
    );
}

#[test]
fn a_disk_that_fills_during_a_run_ends_it_at_once_with_its_logs_closed() {
    let Some(disk) = SmallDisk::mount("budget-fill", "48m", "the disk that fills mid-run") else {
        return;
    };
    let node = SutNode::start("fill-native", &[]);
    let out = disk.path().join("run");
    let child = long_server_run(&node, &out, "native");
    // Another writer takes the disk, all but what the trace writes in a
    // fraction of a second.
    disk.fill_leaving(256 << 10);
    let (code, err) = ends_soon(child);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("the run failed: Run aborted: the disk is full: writing")
            && err.contains("mlperf_log_trace.json failed: No space left on device"),
        "{err}"
    );
    assert!(detail_is_intact(&out), "the detail log is intact");
    assert_eq!(
        detail_value(&out, "result_validity"),
        Some(Value::from("INVALID"))
    );
    let summary = std::fs::read_to_string(out.join("mlperf_log_summary.txt")).unwrap();
    assert!(
        summary.contains("Result is : INVALID")
            && summary.contains("The run failed: Run aborted: the disk is full"),
        "{summary}"
    );
    for log in ["mlperf_log_trace.json", "mlperf_log_accuracy.json"] {
        let text = std::fs::read_to_string(out.join(log)).unwrap();
        serde_json::from_str::<Value>(&text)
            .unwrap_or_else(|e| panic!("{log} is not closed after whole records: {e}"));
    }
    assert!(!out.join(".loadgen-node-disk-reserve").exists());
}

#[test]
fn loading_shows_as_loading() {
    let node = SutNode::start("loading", &[]);
    let out = scratch("budget-loading");
    // 1,024 ResNet50 images of 602,112 bytes: 617 MB to make and load.
    let o = loadgen(&[
        "--sut",
        &node.addr,
        "--model",
        "resnet50",
        "--total-sample-count",
        "1024",
        "--set",
        "min_duration=0",
        "--set",
        "min_query_count=1",
        "--set",
        "target_qps=1",
        "--no-trace",
        "--progress-interval",
        "0.05",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let loading: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("loadgen-node: loading "))
        .collect();
    assert!(!loading.is_empty(), "no loading line: {err}");
    assert!(
        loading
            .iter()
            .all(|l| l.contains(" of 1,024 samples ") && l.ends_with(" so far")),
        "{loading:?}"
    );
    std::fs::remove_dir_all(&out).unwrap();
}
