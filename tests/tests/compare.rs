//! `loadgen-node compare` as users meet it, three times over: an Offline
//! run against a synthetic node, against one whose service time is 10 %
//! longer and against the same build again (one run a side: the side
//! file's intervals); then the three repeats as sides of three runs; the
//! CI gate's exit status; runs of other settings refused.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::{Path, PathBuf};

use tests::{loadgen, scratch, text, SutNode, SMALL_DATA};

const RUN: &[&str] = &[
    "--scenario",
    "Offline",
    "--progress-interval",
    "0",
    "--set",
    "min_query_count=1",
    "--set",
    "target_qps=500",
];

fn run(node: &SutNode, out: &Path, duration_ms: u32) {
    let mut args = vec!["--sut", &node.addr];
    args.extend_from_slice(SMALL_DATA);
    args.extend_from_slice(RUN);
    let duration = format!("min_duration={duration_ms}");
    args.extend(["--set", &duration, "--output-dir", out.to_str().unwrap()]);
    let o = loadgen(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// `compare BASE... -- NEW... EXTRA...`: exit status, stdout, stderr.
fn compare(base: &[&PathBuf], new: &[&PathBuf], extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args: Vec<String> = vec!["compare".into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(base.iter().map(|p| p.display().to_string()));
    args.push("--".into());
    args.extend(new.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = loadgen(&args);
    (o.status.code(), text(&o.stdout), text(&o.stderr))
}

fn verdict(out: &str) -> &str {
    out.lines()
        .find_map(|l| l.strip_prefix("verdict: "))
        .and_then(|v| v.split(" (").next())
        .unwrap_or_else(|| panic!("no verdict in {out}"))
}

/// The change of the judged samples/s, in percent.
fn throughput_change(out: &str) -> f64 {
    let row = out
        .lines()
        .find(|l| l.starts_with("* samples/s"))
        .unwrap_or_else(|| panic!("no samples/s row in {out}"));
    row.split_whitespace()
        .find(|w| w.starts_with('+') || w.starts_with('-'))
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no change in {row}"))
}

#[test]
fn compare_tells_a_slower_node_from_the_same_build() {
    // 2 ms a sample in batches of up to 4: a busy host's late wake-ups
    // (other tests, other builds) cost a batch a smaller share of its time
    // than a lone sample's.
    let node = |name, per_sample| {
        let spec = format!("batch:0+{per_sample}");
        SutNode::start(name, &["--max-batch-size", "4", "--service-time", &spec])
    };
    // The same build twice, and a node 10 % slower.
    let (fast, same, slow) = (
        node("cmp-fast", 2000),
        node("cmp-same", 2000),
        node("cmp-slow", 2200),
    );
    let root = scratch("compare");
    let dir = |name: String| root.join(name);
    let (mut base, mut again, mut slower) = (Vec::new(), Vec::new(), Vec::new());
    for i in 1..=3 {
        // The three runs at once, each against its node: whatever else the
        // host does meanwhile weighs on all three alike.
        let (a, b, s) = (
            dir(format!("a{i}")),
            dir(format!("b{i}")),
            dir(format!("s{i}")),
        );
        std::thread::scope(|scope| {
            for (node, out) in [(&fast, &a), (&same, &b), (&slow, &s)] {
                scope.spawn(move || run(node, out, 2000));
            }
        });

        // One run a side: the side file's per-sample latencies.
        let (code, out, err) = compare(&[&a], &[&s], &[]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(verdict(&out), "REGRESSED", "repeat {i}:\n{out}");
        // 1/1.1 - 1 = -9.1 %.
        let change = throughput_change(&out);
        assert!(
            (-20.0..-4.0).contains(&change),
            "repeat {i}: {change}\n{out}"
        );
        assert!(
            out.contains("per-sample latencies (mlperf_net_latencies.bin)"),
            "{out}"
        );

        let (code, out, err) = compare(&[&a], &[&b], &["--fail-on-regression", "0"]);
        assert_eq!(verdict(&out), "WITHIN NOISE", "repeat {i}:\n{out}");
        assert_eq!(code, Some(0), "{out}{err}");

        // The CI gate: 10 % slower fails a 1 % gate, not a 50 % one.
        let (code, out, _) = compare(&[&a], &[&s], &["--fail-on-regression", "1"]);
        assert_eq!(code, Some(7), "{out}");
        assert!(
            out.contains("--fail-on-regression 1: FAILED: samples/s is worse by"),
            "{out}"
        );
        let (code, out, _) = compare(&[&a], &[&s], &["--fail-on-regression", "50"]);
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("--fail-on-regression 50: passed"), "{out}");
        base.push(a);
        again.push(b);
        slower.push(s);
    }

    // Three runs a side: their spread.
    fn r(v: &[PathBuf]) -> Vec<&PathBuf> {
        v.iter().collect()
    }
    // Their spread is small enough to make a few tenths of a percent
    // between two nodes sure: the noise threshold (1 %) keeps that out.
    let (code, out, err) = compare(&r(&base), &r(&again), &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(verdict(&out), "WITHIN NOISE", "{out}");
    assert!(out.contains("beyond 1 % (--noise-threshold)"), "{out}");
    assert!(
        out.contains("the spread of repeated runs (3 base, 3 new)"),
        "{out}"
    );
    let (_, out, _) = compare(&r(&base), &r(&slower), &[]);
    assert_eq!(verdict(&out), "REGRESSED", "{out}");
    let change = throughput_change(&out);
    assert!((-20.0..-4.0).contains(&change), "{change}\n{out}");

    // Other settings: refused, naming the key, unless --force.
    let other = dir("longer".into());
    run(&fast, &other, 2500);
    let (code, _, err) = compare(&[&base[0]], &[&other], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("not comparable"), "{err}");
    assert!(
        err.contains("effective_min_duration_ms (2000 against 2500)"),
        "{err}"
    );
    let (code, out, err) = compare(&[&base[0]], &[&other], &["--force"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert!(out.contains("verdict: "), "{out}");

    // A directory that is no run.
    let (code, _, err) = compare(&[&base[0]], &[&root.to_path_buf()], &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("mlperf_log_detail.txt"), "{err}");
}
