//! Every benchmark of the current round (the submission checker's v6.1 that
//! the official LoadGen 6.0.17's mlperf.conf knows), each a short
//! `loadgen-node submission` plan against a synthetic sut-node answering as
//! that benchmark, with the scenarios its category requires; then, with
//! MLPERF_INFERENCE_DIR set, the official checker on each tree. Every row
//! must be VALID but for its accuracy figure, every required audit PASS, and
//! every error line of the checker must be one a shortened run on synthetic
//! answers cannot avoid: the short durations and query counts, and the
//! accuracy figures synthetic answers cannot reach. Any other line fails
//! the walk, quoted.
//!
//! `cargo test -p tests --test benchmark_walk` (the native engine); with
//! the official engine, `tests/official/run.sh` runs
//! `--features official-loadgen --test benchmark_walk official` for four of
//! them. Each benchmark prints its verdict and time; the walk its total.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed expectation is its failure

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use facts::benchmarks::Round;
use tests::{binary, loadgen, scratch, text, SutNode};

/// The benchmarks whose required audits cannot pass against synthetic
/// nodes (none: every audit of the suite table passes, and the walk
/// requires a PASS of each): a name here has its rows' audits expected to
/// FAIL, and the checker's complaints of those audits accepted for it alone.
const AUDITS_PENDING: &[&str] = &[];

/// The benchmarks the official engine's walk leaves out for now (none:
/// with an LLM's answers, first token then answer, the official engine
/// hands the official LoadGen each first token before its sample's answer,
/// from one thread). Name one here, with why, when the official engine
/// cannot walk it.
const OFFICIAL_PENDING: &[&str] = &[];

/// The category whose required scenarios a benchmark's walk runs, as the
/// checker's `required-scenarios-<category>` lists them.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Category {
    Datacenter,
    Edge,
}

impl Category {
    fn system_type(self) -> &'static str {
        match self {
            Category::Datacenter => "datacenter",
            Category::Edge => "edge",
        }
    }
}

/// One benchmark of the walk.
struct Walk {
    /// The checker's benchmark folder.
    folder: &'static str,
    /// The model as `--model` takes it.
    model: &'static str,
    category: Category,
    scenarios: &'static [&'static str],
    /// The synthetic node's flags beyond `--benchmark MODEL`.
    node: &'static [&'static str],
    /// Another accuracy target of a benchmark walked under its first
    /// folder: the same runs, the same tree but for the folder's name, so
    /// walked only when WALK_ONLY names it.
    twin: bool,
}

const OFFLINE: &[&str] = &["Offline"];
/// The checker's v6.1 requires, beside Offline, one of Server and
/// Interactive of the datacenter LLMs (and Qwen3-VL).
const OFFLINE_SERVER: &[&str] = &["Offline", "Server"];
/// 20 µs a sample, up to 64 in a batch: 50,000 samples/s, so that the
/// accuracy runs over whole data sets (rgat's 788,379 samples, dlrm-v3's
/// 349,823) take seconds, and a SingleStream query about the round trip.
const FAST: &[&str] = &["--service-time", "batch:0+20", "--max-batch-size", "64"];
/// Answers cut to 64 bytes: the real ones (3D-UNet's 33 MB labels,
/// SDXL's 3 MB images, WAN-2.2's 450 MB videos, DLRMv3's 2,048 scores)
/// would make accuracy logs of gigabytes on a CI host; their size is not
/// what the checker judges.
const SMALL_ANSWERS: &[&str] = &[
    "--service-time",
    "batch:0+20",
    "--max-batch-size",
    "64",
    "--output-size",
    "64",
];

/// The walk: each checker benchmark of v6.1 that mlperf.conf of 6.0.17
/// knows. Edge where the checker lists the benchmark for edge only (resnet,
/// bert, llama3.1-8b-edge, stable-diffusion-xl, yolo); datacenter for the
/// others, where it requires Offline alone (3d-unet and whisper could be
/// either: datacenter needs fewer scenarios, so a shorter walk). The
/// benchmarks that 6.0.17's LoadGen does not run (`loadgen-node suite`
/// lists them) are not walked.
const WALK: &[Walk] = &[
    Walk {
        folder: "resnet",
        model: "resnet50",
        category: Category::Edge,
        scenarios: &["SingleStream", "MultiStream", "Offline"],
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "bert-99",
        model: "bert",
        category: Category::Edge,
        scenarios: &["SingleStream", "Offline"],
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "bert-99.9",
        model: "bert",
        category: Category::Edge,
        scenarios: &["SingleStream", "Offline"],
        node: FAST,
        twin: true,
    },
    Walk {
        folder: "3d-unet-99",
        model: "3d-unet",
        category: Category::Datacenter,
        scenarios: OFFLINE,
        node: SMALL_ANSWERS,
        twin: false,
    },
    Walk {
        folder: "3d-unet-99.9",
        model: "3d-unet",
        category: Category::Datacenter,
        scenarios: OFFLINE,
        node: SMALL_ANSWERS,
        twin: true,
    },
    Walk {
        folder: "llama3.1-8b",
        model: "llama3.1-8b",
        category: Category::Datacenter,
        scenarios: OFFLINE_SERVER,
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "llama3.1-8b-edge",
        model: "llama3.1-8b-edge",
        category: Category::Edge,
        scenarios: &["SingleStream", "Offline"],
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "llama2-70b-99.9",
        model: "llama2-70b",
        category: Category::Datacenter,
        scenarios: OFFLINE_SERVER,
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "stable-diffusion-xl",
        model: "stable-diffusion-xl",
        category: Category::Edge,
        scenarios: &["SingleStream", "Offline"],
        node: SMALL_ANSWERS,
        twin: false,
    },
    Walk {
        folder: "rgat",
        model: "rgat",
        category: Category::Datacenter,
        scenarios: OFFLINE,
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "deepseek-r1",
        model: "deepseek-r1",
        category: Category::Datacenter,
        scenarios: OFFLINE_SERVER,
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "whisper",
        model: "whisper",
        category: Category::Datacenter,
        scenarios: OFFLINE,
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "gpt-oss-120b",
        model: "gpt-oss-120b",
        category: Category::Datacenter,
        scenarios: OFFLINE_SERVER,
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "wan-2.2-t2v-a14b",
        model: "wan-2.2-t2v-a14b",
        category: Category::Datacenter,
        scenarios: &["Offline", "SingleStream"],
        node: SMALL_ANSWERS,
        twin: false,
    },
    Walk {
        folder: "qwen3-vl-235b-a22b",
        model: "qwen3-vl-235b-a22b",
        category: Category::Datacenter,
        scenarios: OFFLINE_SERVER,
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "dlrm-v3",
        model: "dlrm-v3",
        category: Category::Datacenter,
        scenarios: &["Server", "Offline"],
        node: SMALL_ANSWERS,
        twin: false,
    },
    Walk {
        folder: "yolo-99",
        model: "yolo",
        category: Category::Edge,
        scenarios: &["SingleStream", "MultiStream", "Offline"],
        node: FAST,
        twin: false,
    },
    Walk {
        folder: "yolo-95",
        model: "yolo",
        category: Category::Edge,
        scenarios: &["SingleStream", "MultiStream", "Offline"],
        node: FAST,
        twin: true,
    },
];

/// Shortened settings of each scenario (300 ms, and the queries early
/// stopping needs), each expecting more of the node than it does so that
/// the LoadGen issues enough to fill the duration. Server's rate carries
/// its accuracy run over the whole data set (dlrm-v3's 349,823 samples) in
/// about 35 s, below what the official engine's debug build keeps within
/// dlrm-v3's 80 ms bound.
fn settings(scenario: &str) -> &'static str {
    match scenario {
        "Offline" => "target_qps = 60000\n",
        "Server" => "target_qps = 10000\nmin_query_count = 700\n",
        "SingleStream" => "target_latency = 0.1\nmin_query_count = 100\n",
        "MultiStream" => "target_latency = 0.2\nmin_query_count = 700\n",
        other => panic!("no settings for {other}"),
    }
}

/// Every run's inputs are 64 bytes: the real ones would not fit a CI host
/// (dlrm-v3 loads its whole data set, 34.5 GB) and their size is not what
/// the checker judges.
const SAMPLE_BYTES: &str = "64";

fn system_name(w: &Walk) -> String {
    format!("walk_{}", w.folder.replace(['.', '-'], "_"))
}

/// The scenarios walked with `engine`.
fn scenarios(w: &Walk, _engine: &str) -> Vec<&'static str> {
    w.scenarios.to_vec()
}

fn plan(w: &Walk, sut: &str, engine: &str, dir: &Path) -> String {
    let walked = scenarios(w, engine);
    let scenarios: Vec<String> = walked.iter().map(|s| format!("\"{s}\"")).collect();
    let mut per = String::new();
    for s in &walked {
        per.push_str(&format!("[benchmark.settings.{s}]\n{}", settings(s)));
    }
    format!(
        r#"system = "{system}"
submitter = "MLPerfNet"
sut = "{sut}"
engine = "{engine}"
run_flags = ["--sample-bytes", "{SAMPLE_BYTES}"{answers}]

[system_description]
system_type = "{category}"
status = "rdi"
accelerators_per_node = "1"
accelerator_model_name = "synthetic"
host_processors_per_node = "1"
host_processor_core_count = "2"

[[benchmark]]
model = "{model}"
benchmark = "{folder}"
scenarios = [{scenarios}]
accuracy_command = "{loadgen} check-synthetic --model {model} --accuracy-log {{accuracy_log}} --sample-bytes {SAMPLE_BYTES}"
{test07}[benchmark.settings]
min_duration = 300
{per}"#,
        system = system_name(w),
        // The node answers 64 bytes (DLRMv3: 16 candidates in its accuracy
        // layout, 204 bytes): the plan's disk check counts that.
        answers = match (w.node == SMALL_ANSWERS, w.model) {
            (true, "dlrm-v3") => ", \"--max-answer-bytes\", \"256\"",
            (true, _) => ", \"--max-answer-bytes\", \"64\"",
            (false, _) => "",
        },
        category = w.category.system_type(),
        model = w.model,
        folder = w.folder,
        scenarios = scenarios.join(", "),
        loadgen = binary("loadgen-node").display(),
        test07 = match w.model {
            "gpt-oss-120b" => format!(
                "compliance_dataset = \"compliance\"\n\
                 compliance_accuracy_command = \"{} check-synthetic --model {} --dataset {} \
                 --accuracy-log {{accuracy_log}}\"\nscore_pattern = 'accuracy=([\\d.]+)%'\n",
                binary("loadgen-node").display(),
                w.model,
                dir.join("compliance").display()
            ),
            _ => String::new(),
        },
    )
}

/// What an error line of the checker is about.
#[derive(Debug, PartialEq)]
enum Complaint {
    /// Shortened runs: durations and query counts below the rules'.
    Duration,
    /// An accuracy figure a synthetic answer cannot reach (or an accuracy
    /// script's figure synthetic answers do not print).
    Accuracy,
    /// A required audit loadgen-node does not run yet (AUDITS_PENDING).
    PendingAudit,
    /// The summary lines that count the results with errors.
    Tally,
    Other,
}

fn classify(line: &str, pending: bool) -> Complaint {
    let has = |s: &str| line.contains(s);
    // The checker's words for runs shorter than the rules' (600 s, the
    // scenario's minimum query count), and early stopping's estimate that
    // needs more queries than a short run makes.
    if has("Test duration less than 600s")
        || has("Required minimum Query Count not met")
        || has("Required minimum samples per query not met")
        || has("Not enough samples were processed for early stopping")
    {
        return Complaint::Duration;
    }
    // A performance audit (TEST01's second half, TEST04) compares its run
    // with the reference run within 10 %: runs of 300 ms on a shared host
    // differ by more. Accepted only where the audit's own verification
    // failed on that comparison alone.
    if let Some(dir) = line
        .split_once("Compliance test performance check in ")
        .and_then(|(_, rest)| rest.strip_suffix(" failed"))
    {
        if score_only(Path::new(dir)) {
            return Complaint::Duration;
        }
    }
    // Synthetic answers print `accuracy=P%`, which no accuracy script but
    // ImageNet's prints: the checker finds no figure, or one below the
    // target, and says only that the accuracy checks failed.
    if has("accuracy not met") || has("Some accuracy checks Checks failed") {
        return Complaint::Accuracy;
    }
    // WAN-2.2's sample videos for reviewers, which its accuracy tooling
    // renders from real answers; a synthetic answer is no video (the
    // plan's row says they are missing, and the walk checks that it does).
    if has("expected to have the following extra files") && has("/videos") {
        return Complaint::Accuracy;
    }
    let audit = ["TEST07", "TEST08", "TEST09"].iter().any(|t| has(t));
    if pending && audit && (has("Missing") || has("missing") || has("not found") || has("FAIL")) {
        return Complaint::PendingAudit;
    }
    // The checker's tallies: each follows the lines above that explain it.
    if has("SUMMARY: submission has errors")
        || has("NoResults")
        || has("Results=")
        || has("Checks failed for")
    {
        return Complaint::Tally;
    }
    Complaint::Other
}

/// Whether an audit's performance verification failed on its score alone
/// (the short run measured faster or slower than the reference), its
/// accuracy verification, if it has one, passing.
fn score_only(test_dir: &Path) -> bool {
    let read = |f: &str| std::fs::read_to_string(test_dir.join(f)).ok();
    let perf = read("verify_performance.txt").unwrap_or_default();
    let accuracy_ok = read("verify_accuracy.txt").is_none_or(|t| t.contains("TEST PASS"));
    perf.contains("TEST FAIL: Test score invalid") && accuracy_ok
}

/// One benchmark's outcome.
struct Outcome {
    folder: &'static str,
    seconds: f64,
    rows: Vec<String>,
    /// The checker's error lines, each with its class.
    checker: Option<Vec<(Complaint, String)>>,
    problems: Vec<String>,
}

fn walk_one(w: &Walk, engine: &str, inference: Option<&Path>, root: &Path) -> Outcome {
    let started = Instant::now();
    let pending = AUDITS_PENDING.contains(&w.folder);
    let mut node_flags = vec!["--benchmark", w.model];
    node_flags.extend_from_slice(w.node);
    let node = SutNode::start(&format!("walk-{}", w.folder), &node_flags);
    let dir = root.join(w.folder);
    std::fs::create_dir_all(&dir).unwrap();
    if w.model == "gpt-oss-120b" {
        // TEST07 runs on the benchmark's compliance data set of 990 samples.
        tests::npy_dataset(&dir.join("compliance"), 990);
    }
    let plan_path = dir.join("plan.toml");
    std::fs::write(&plan_path, plan(w, &node.addr, engine, &dir)).unwrap();
    let mut args = vec![
        "submission".to_string(),
        plan_path.display().to_string(),
        "--no-preflight".into(),
    ];
    if let Some(i) = inference {
        args.extend(["--inference".into(), i.display().to_string()]);
    }
    let mut problems = Vec::new();
    // A run on a busy host may miss a latency bound, or an audit its 10 %:
    // the plan resumes once, redoing only what did not pass.
    let mut out = String::new();
    for attempt in 0..2 {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = loadgen(&argv);
        out = text(&o.stdout);
        let err = text(&o.stderr);
        if !matches!(o.status.code(), Some(0 | 6)) {
            problems.push(format!(
                "submission exited {:?}:\n{out}\n{err}",
                o.status.code()
            ));
            break;
        }
        let again = rows(&out, w.folder)
            .iter()
            .any(|r| r.contains(": FAIL") || r.contains("performance: INVALID"));
        if !again || attempt == 1 {
            break;
        }
        eprintln!("{}: redoing what did not pass:\n{out}", w.folder);
    }
    let rows = rows(&out, w.folder);
    if problems.is_empty() {
        let results = dir
            .join("submission/network/MLPerfNet/results")
            .join(system_name(w))
            .join(w.folder);
        check_rows(w, engine, &rows, &results, pending, &mut problems);
    }
    let checker = inference.map(|_| {
        let log = std::fs::read_to_string(dir.join("checker.log")).unwrap_or_default();
        if !log.contains("SUMMARY:") {
            problems.push(format!("the checker gave no verdict:\n{log}"));
        }
        log.lines()
            .filter(|l| l.contains("ERROR"))
            .map(|l| (classify(l, pending), l.to_string()))
            .collect::<Vec<_>>()
    });
    if let Some(lines) = &checker {
        for (c, l) in lines {
            if *c == Complaint::Other {
                problems.push(format!("checker: {l}"));
            }
        }
    }
    Outcome {
        folder: w.folder,
        seconds: started.elapsed().as_secs_f64(),
        rows,
        checker,
        problems,
    }
}

/// The plan's table rows of this benchmark.
fn rows(out: &str, folder: &str) -> Vec<String> {
    let head = format!("{folder} ");
    out.lines()
        .filter(|l| l.starts_with(&head))
        .map(str::to_string)
        .collect()
}

/// Each scenario's row: accuracy done, performance VALID, every audit the
/// benchmark requires PASS (or, pending, run and FAIL).
fn check_rows(
    w: &Walk,
    engine: &str,
    rows: &[String],
    results: &Path,
    pending: bool,
    problems: &mut Vec<String>,
) {
    let b = facts::benchmarks::find(w.model).unwrap();
    let audits = b.rules(Round::CURRENT).unwrap().audits;
    for s in &scenarios(w, engine) {
        let folder = match (b.interactive, *s) {
            (true, "Server") => "Interactive",
            _ => s,
        };
        let Some(row) = rows
            .iter()
            .find(|r| r.starts_with(&format!("{} {folder} ", w.folder)))
        else {
            problems.push(format!("no row for {s}"));
            continue;
        };
        let extras = facts::benchmarks::accuracy_extras(w.folder, Round::CURRENT);
        let accuracy = match extras {
            None => "accuracy: done".to_string(),
            Some(e) => format!("accuracy: {} sample files missing", e.samples.len() + 1),
        };
        let mut all_passed = extras.is_none();
        let mut want = vec![accuracy, "performance: VALID".to_string()];
        for a in audits {
            let runs = !matches!(
                a,
                facts::benchmarks::Audit::Test07
                    | facts::benchmarks::Audit::Test08
                    | facts::benchmarks::Audit::Test09
            ) || !pending;
            let cell = match runs {
                true => format!("{}: PASS", a.name()),
                false => format!("{}: FAIL", a.name()),
            };
            let failed = format!("{}: FAIL", a.name());
            if runs && row.contains(&failed) && score_only(&results.join(folder).join(a.name())) {
                // Its measurement alone, as the checker's line says too.
                eprintln!("{row}: {} failed on its score alone", a.name());
                all_passed = false;
                continue;
            }
            all_passed &= runs;
            want.push(cell);
        }
        for cell in &want {
            if !row.contains(cell.as_str()) {
                problems.push(format!("{row}: wants `{cell}`"));
            }
        }
        if all_passed && !row.contains(" VALID ") {
            problems.push(format!("{row}: not VALID"));
        }
    }
}

fn walk(engine: &str, only: Option<&[&str]>) {
    let started = Instant::now();
    let inference = tests::inference_checkout("the official submission checker on each tree");
    let root = scratch(&format!("walk-{engine}"));
    // WALK_ONLY=resnet,bert-99 walks those alone.
    let chosen = std::env::var("WALK_ONLY").unwrap_or_default();
    let chosen: Vec<&str> = chosen.split(',').filter(|s| !s.is_empty()).collect();
    let left_out: Vec<&str> = WALK
        .iter()
        .map(|w| w.folder)
        .filter(|f| OFFICIAL_PENDING.contains(f))
        .collect();
    if engine == "official" && !left_out.is_empty() {
        eprintln!(
            "walk (official engine): leaving out {} (OFFICIAL_PENDING)",
            left_out.join(", ")
        );
    }
    let todo: Vec<&Walk> = WALK
        .iter()
        .filter(|w| engine != "official" || !OFFICIAL_PENDING.contains(&w.folder))
        .filter(|w| only.is_none_or(|o| o.contains(&w.folder)))
        .filter(|w| match chosen.is_empty() {
            true => !w.twin,
            false => chosen.contains(&w.folder),
        })
        .collect();
    let queue = Mutex::new(todo.into_iter());
    let outcomes = Mutex::new(Vec::new());
    // Two benchmarks at a time: each is one node and one loadgen-node, and
    // their trees and ports are their own.
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let Some(w) = queue.lock().unwrap().next() else {
                    return;
                };
                let o = walk_one(w, engine, inference.as_deref(), &root);
                report(&o);
                outcomes.lock().unwrap().push(o);
            });
        }
    });
    let outcomes = outcomes.into_inner().unwrap();
    let failed: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.problems.iter().map(move |p| format!("{}: {p}", o.folder)))
        .collect();
    eprintln!(
        "walk ({engine} engine): {} benchmarks in {:.0} s{}",
        outcomes.len(),
        started.elapsed().as_secs_f64(),
        match inference {
            Some(_) => ", each tree before the official checker",
            None => " (no checker: MLPERF_INFERENCE_DIR unset)",
        }
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

fn report(o: &Outcome) {
    let mut s = format!("== {} ({:.1} s)\n", o.folder, o.seconds);
    for r in &o.rows {
        s.push_str(&format!("  {r}\n"));
    }
    if let Some(lines) = &o.checker {
        let count = |c: Complaint| lines.iter().filter(|(x, _)| *x == c).count();
        s.push_str(&format!(
            "  checker: {} errors: {} of shortened durations, {} of synthetic accuracy, {} of pending audits, {} tallies, {} other\n",
            lines.len(),
            count(Complaint::Duration),
            count(Complaint::Accuracy),
            count(Complaint::PendingAudit),
            count(Complaint::Tally),
            count(Complaint::Other),
        ));
        for (c, l) in lines {
            s.push_str(&format!("    [{c:?}] {l}\n"));
        }
    }
    for p in &o.problems {
        s.push_str(&format!("  PROBLEM: {p}\n"));
    }
    eprint!("{s}");
}

#[test]
fn every_benchmark_of_the_round_makes_a_tree_the_checker_faults_only_for_short_runs() {
    walk("native", None);
}

#[cfg(feature = "official-loadgen")]
#[test]
fn official_engine_walk_of_four_benchmarks() {
    walk(
        "official",
        Some(&["gpt-oss-120b", "dlrm-v3", "llama3.1-8b", "resnet"]),
    );
}

#[test]
fn the_walk_covers_every_benchmark_of_the_round_that_the_loadgen_runs() {
    // Every checker folder of the suite table's current round is walked,
    // with the scenarios of a category.
    let round = Round::CURRENT;
    for b in facts::benchmarks::BENCHMARKS {
        let Some(r) = b.rules(round) else { continue };
        if b.interactive {
            continue; // the base benchmark's optional scenario
        }
        for folder in r.checker {
            assert!(
                WALK.iter().any(|w| w.folder == *folder),
                "{folder} is not walked"
            );
        }
    }
}
