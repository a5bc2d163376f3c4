//! What a run is given to read: every file bounded (a device without end
//! fails fast, naming the file), an audit.config's values checked as
//! `--set`'s are (naming the file and the key), a plan's names kept inside
//! its output tree.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::process::Command;
use std::time::{Duration, Instant};

use tests::{binary, loadgen, scratch, text, SMALL_DATA};

#[test]
fn files_without_end_are_refused_at_once_naming_them() {
    let started = Instant::now();
    let o = loadgen(&["--sut-file", "/dev/zero", "--scenario", "Offline"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/dev/zero") && err.contains("larger than"),
        "{err}"
    );
    let o = loadgen(&["submission", "/dev/zero"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot read the plan /dev/zero") && err.contains("larger than"),
        "{err}"
    );
    let o = loadgen(&["--audit-config", "/dev/zero", "--scenario", "Offline"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/dev/zero") && err.contains("larger than"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn an_audit_config_out_of_range_is_refused_naming_file_and_key() {
    for (line, key) in [
        ("*.*.min_duration = 31536000001", "min_duration"),
        ("*.*.mode = 99", "mode"),
        (
            "*.*.accuracy_log_probability = nan",
            "accuracy_log_probability",
        ),
    ] {
        let dir = scratch("audit-range");
        std::fs::write(dir.join("audit.config"), format!("{line}\n")).unwrap();
        let o = Command::new(binary("loadgen-node"))
            .current_dir(&dir)
            .args(["--scenario", "Server", "--set", "target_qps=100"])
            .args(SMALL_DATA)
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{line}: {err}");
        assert!(
            err.contains(&format!(
                "audit.config:1: `{}",
                line.split(" =").next().unwrap()
            )) && err.contains(&format!("{key} must be")),
            "{line}: {err}"
        );
    }
    // A year at a high target plans more than a run can keep track of.
    let dir = scratch("audit-scale");
    std::fs::write(dir.join("audit.config"), "*.*.min_duration = 31536000000\n").unwrap();
    let o = Command::new(binary("loadgen-node"))
        .current_dir(&dir)
        .args(["--scenario", "Server", "--set", "target_qps=100000"])
        .args(SMALL_DATA)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("min_duration 31536000000 ms"), "{err}");
    // Keys the engines do not read are left alone, as before.
    let dir = scratch("audit-unknown");
    std::fs::write(
        dir.join("audit.config"),
        "*.*.mode = 2\n*.*.test09_min_output_tokens = 4\n*.*.min_duration = 100\n",
    )
    .unwrap();
    let o = Command::new(binary("loadgen-node"))
        .current_dir(&dir)
        .args(["--scenario", "Offline", "--set", "target_qps=1000"])
        .args(["--output-dir", dir.to_str().unwrap()])
        .args(SMALL_DATA)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn a_plan_naming_a_folder_outside_its_tree_is_refused_naming_the_key() {
    let dir = scratch("plan-escape");
    for (key, value) in [("system", "../../../../x"), ("submitter", "/tmp/abs")] {
        let other = if key == "system" {
            "submitter"
        } else {
            "system"
        };
        let plan = dir.join(format!("{key}.toml"));
        std::fs::write(
            &plan,
            format!(
                "{key} = \"{value}\"\n{other} = \"ok\"\nsut = \"127.0.0.1:1\"\n\
                 [[benchmark]]\nmodel = \"resnet50\"\nscenarios = [\"Offline\"]\n"
            ),
        )
        .unwrap();
        let o = loadgen(&["submission", plan.to_str().unwrap()]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(&format!("`{key}` = {value:?}")), "{err}");
        assert!(!dir.join("x").exists() && !std::path::Path::new("/tmp/abs").exists());
    }
}
