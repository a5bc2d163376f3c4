//! `--engine official`: the official LoadGen, compiled into this binary from
//! its unaltered sources (build.rs), runs the test; the QDL is its SUT and
//! this node's QSL its QSL. The C++ side is official/adapter.cc; this module
//! is the Rust side of its callbacks and of the completion entry points.
//!
//! Call flow: `lgn_start_test` (the official `StartTest`, on this thread)
//! calls back `load_samples`/`unload_samples` (the QSL), `sut_name` (the
//! QDL's round trip to every node) and `issue_query` (the QDL sends each
//! sample). The QDL's network threads hand answers to `OfficialLoadGen`,
//! which calls `lgn_samples_complete` (the official `QuerySamplesComplete`)
//! with the answer bytes where they lie: no copy.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use loadgen_engine::disk::Reserve;
use loadgen_engine::{
    QuerySample, QuerySampleLibrary, QuerySampleResponse, Scenario, SystemUnderTest, TestMode,
};
use qdl::{ForeignLoadGen, ForeignSut};

use crate::budget::{DiskWatch, RESERVE_FILE};
use crate::exit::Exit;
use crate::observe::Observers;
use crate::plan::{RunPlan, SutPlan, UserConf};
use crate::progress::{Progress, Target};
use crate::system::System;

#[repr(C)]
struct Response {
    id: u64,
    data: *const u8,
    size: usize,
    n_tokens: i64,
}

type SetName = unsafe extern "C" fn(out: *mut c_void, name: *const c_char, len: usize);

#[repr(C)]
struct Callbacks {
    ctx: *mut c_void,
    sut_name: extern "C" fn(ctx: *mut c_void, out: *mut c_void, set: SetName),
    issue_query: extern "C" fn(ctx: *mut c_void, samples: *const QuerySample, count: usize),
    flush_queries: extern "C" fn(ctx: *mut c_void),
    load_samples: extern "C" fn(ctx: *mut c_void, indices: *const usize, count: usize),
    unload_samples: extern "C" fn(ctx: *mut c_void, indices: *const usize, count: usize),
    qsl_name: *const c_char,
    total_sample_count: usize,
    performance_sample_count: usize,
}

#[repr(C)]
struct Test {
    model: *const c_char,
    scenario: c_int,
    mode: c_int,
    user_conf: *const c_char,
    audit_config: *const c_char,
    outdir: *const c_char,
    enable_trace: c_int,
    null_sut: c_int,
}

extern "C" {
    fn lgn_start_test(
        cb: *const Callbacks,
        test: *const Test,
        err: *mut c_char,
        len: usize,
    ) -> c_int;
    fn lgn_samples_complete(responses: *const Response, count: usize);
    fn lgn_first_token_complete(responses: *const Response, count: usize);
    fn lgn_loadgen_version() -> *const c_char;
}

/// The official LoadGen's version, as it reports it.
pub fn loadgen_version() -> String {
    // SAFETY: a pointer to a static std::string's NUL-terminated storage.
    unsafe { CStr::from_ptr(lgn_loadgen_version()) }
        .to_string_lossy()
        .into_owned()
}

/// How the compiled tree compares with the published 6.0.17 file list.
pub fn tree_report() -> String {
    let src = env!("LGN_SRC");
    let files = env!("LGN_TREE_FILES");
    if tree_matches() {
        format!("{src}: matches the published 6.0.17 file list ({files} files checked)")
    } else {
        format!(
            "{src}: DOES NOT MATCH the published 6.0.17 file list: {}",
            env!("LGN_TREE_DIFFERENCES")
        )
    }
}

fn tree_matches() -> bool {
    env!("LGN_TREE_MATCHES") == "1"
}

/// Hands the QDL's answers to the official LoadGen.
struct OfficialLoadGen {
    output_dir: PathBuf,
}

fn to_c(responses: &[QuerySampleResponse<'_>]) -> Vec<Response> {
    responses
        .iter()
        .map(|r| Response {
            id: r.id,
            data: r.data.as_ptr(),
            size: r.data.len(),
            n_tokens: r.n_tokens,
        })
        .collect()
}

impl ForeignLoadGen for OfficialLoadGen {
    fn samples_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        let c = to_c(responses);
        // SAFETY: ids are the LoadGen's own, each outstanding exactly once
        // (ForeignSut guarantees it); the data outlives the call.
        unsafe { lgn_samples_complete(c.as_ptr(), c.len()) }
    }

    fn first_token_complete(&self, responses: &[QuerySampleResponse<'_>]) {
        let c = to_c(responses);
        // SAFETY: as above.
        unsafe { lgn_first_token_complete(c.as_ptr(), c.len()) }
    }

    fn failed(&self, reason: &str) {
        end_failed_run(&self.output_dir, reason)
    }
}

/// The official LoadGen cannot be stopped (it issues until its minimum
/// duration and query count are met, ten minutes and more in a real run),
/// so a failed run ends the process now, its logs in `output_dir` set
/// aside.
fn end_failed_run(output_dir: &Path, reason: &str) -> ! {
    eprintln!("loadgen-node: the run failed: {reason}");
    if let Err(e) = mark_failed(output_dir, reason) {
        eprintln!("loadgen-node: {e:#}");
    }
    let _ = std::io::stdout().flush();
    // SAFETY: _exit ends the process at once, without running the
    // official LoadGen's static destructors while its threads still run.
    unsafe { libc::_exit(Exit::RunFailed.code().into()) }
}

/// What the callbacks reach through `ctx`.
struct Harness {
    /// None: the adapter's own null SUT answers.
    sut: Option<ForeignSut>,
    qsl: Arc<dyn QuerySampleLibrary>,
}

impl Harness {
    fn fail(&self, reason: String) {
        match &self.sut {
            Some(sut) => sut.fail(reason),
            None => eprintln!("loadgen-node: {reason}"),
        }
    }
}

fn harness<'a>(ctx: *mut c_void) -> &'a Harness {
    // SAFETY: `ctx` is the `&Harness` that `run` passes and keeps alive for
    // the whole `lgn_start_test` call, the only time callbacks come.
    unsafe { &*(ctx as *const Harness) }
}

extern "C" fn sut_name(ctx: *mut c_void, out: *mut c_void, set: SetName) {
    let h = harness(ctx);
    let Some(sut) = &h.sut else { return };
    let name = match sut.name() {
        Ok(n) => n,
        Err(e) => {
            // The run cannot stand: its logs will carry this name, and the
            // run is reported failed.
            sut.fail(format!("Name(): {e}"));
            format!("Network SUT (Name failed: {e})")
        }
    };
    // SAFETY: `set` copies the bytes into the adapter's std::string.
    unsafe { set(out, name.as_ptr().cast(), name.len()) }
}

// mlperf::QuerySample is two 64-bit fields, as QuerySample (repr(C)) is.
const _: () = assert!(std::mem::size_of::<QuerySample>() == 16);
const _: () = assert!(std::mem::size_of::<usize>() == 8);

extern "C" fn issue_query(ctx: *mut c_void, samples: *const QuerySample, count: usize) {
    if count == 0 {
        return;
    }
    // SAFETY: the adapter passes its std::vector<mlperf::QuerySample>'s
    // storage, valid for this call, whose layout QuerySample shares.
    let samples = unsafe { std::slice::from_raw_parts(samples, count) };
    if let Some(sut) = &harness(ctx).sut {
        sut.issue_query(samples);
    }
}

extern "C" fn flush_queries(ctx: *mut c_void) {
    if let Some(sut) = &harness(ctx).sut {
        sut.flush_queries();
    }
}

fn indices<'a>(indices: *const usize, count: usize) -> &'a [usize] {
    if count == 0 {
        return &[];
    }
    // SAFETY: the adapter's std::vector<QuerySampleIndex> storage, valid for
    // the call.
    unsafe { std::slice::from_raw_parts(indices, count) }
}

extern "C" fn load_samples(ctx: *mut c_void, idx: *const usize, count: usize) {
    let h = harness(ctx);
    if let Err(e) = h.qsl.load_samples(indices(idx, count)) {
        h.fail(format!("the QSL could not load samples: {e}"));
    }
}

extern "C" fn unload_samples(ctx: *mut c_void, idx: *const usize, count: usize) {
    let h = harness(ctx);
    if let Err(e) = h.qsl.unload_samples(indices(idx, count)) {
        h.fail(format!("the QSL could not unload samples: {e}"));
    }
}

fn c_string(what: &str, s: String) -> Result<CString> {
    CString::new(s).with_context(|| format!("{what} contains a NUL byte"))
}

fn c_path(what: &str, p: &Path) -> Result<CString> {
    c_string(what, p.display().to_string())
}

/// Whether this process has started an official test.
static STARTED: AtomicBool = AtomicBool::new(false);

/// The official LoadGen applies its mlperf.conf only on the first
/// `FromConfig` of a process (`test_settings_internal.cc`); every later
/// run would get seeds of 0, the C++ default durations and an
/// `error_invalid_config` record. So a process runs one official test.
fn claim_the_process() -> Result<()> {
    if STARTED.swap(true, Ordering::SeqCst) {
        bail!(
            "the official LoadGen has already run a test in this process, and it applies its \
             mlperf.conf only to a process's first run: a second run here would log seeds of 0 \
             and the C++ default durations. Run each official test in a loadgen-node process of \
             its own (`submission` and `audit` do)"
        );
    }
    Ok(())
}

/// Runs the test of `plan` with the official LoadGen, once per process.
pub fn run(plan: &RunPlan) -> Result<Exit> {
    claim_the_process()?;
    if !tree_matches() {
        eprintln!(
            "loadgen-node: WARNING: the official LoadGen compiled into this binary was built \
             from a tree that is not the released one; its runs cannot be submitted.\n  {}",
            tree_report()
        );
    }
    for dir in [&plan.output.dir, &plan.output.extras] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    if let UserConf::Merged { path, text } = &plan.test.user_conf {
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let system = System::open(
        &plan.sut,
        &format!("official LoadGen {}", loadgen_version()),
    )?;
    let observers = Observers::start(plan, None, system.qdl())?;
    let loading = match &system {
        System::Network { qsl, .. } => Some(qsl.progress()),
        System::Null { .. } => None,
    };
    let harness = match system {
        System::Null { qsl, .. } => {
            eprintln!(
                "loadgen-node: official LoadGen {} with its in-process null SUT",
                loadgen_version()
            );
            Harness { sut: None, qsl }
        }
        System::Network { qsl, qdl } => {
            let official = OfficialLoadGen {
                output_dir: plan.output.dir.clone(),
            };
            // A failure ends the process (`OfficialLoadGen::failed`):
            // nothing to drain, so no set of outstanding ids.
            let mut sut = ForeignSut::ending_the_process(*qdl, Arc::new(official));
            // The official LoadGen records first tokens and answers in the
            // order its calling threads' log buffers are read, not in the
            // order of the calls: in token runs, one thread makes them all.
            if matches!(&plan.sut, SutPlan::Network(n) if n.qdl.token_latencies) {
                sut = sut
                    .with_first_tokens(plan.test.scenario != Scenario::Offline)
                    .context(
                        "cannot start the thread that hands answers to the official LoadGen",
                    )?;
            }
            Harness {
                sut: Some(sut),
                qsl,
            }
        }
    };

    let qsl = &harness.qsl;
    let qsl_name = c_string("the QSL name", qsl.name())?;
    let callbacks = Callbacks {
        ctx: &harness as *const Harness as *mut c_void,
        sut_name,
        issue_query,
        flush_queries,
        load_samples,
        unload_samples,
        qsl_name: qsl_name.as_ptr(),
        total_sample_count: qsl.total_sample_count(),
        performance_sample_count: qsl.performance_sample_count(),
    };
    let model = c_string("--model", plan.test.model.clone())?;
    let user_conf = plan
        .test
        .user_conf
        .path()
        .map(|p| c_path("--user-conf", p))
        .transpose()?;
    // Without an audit file the LoadGen looks for ./audit.config, which was
    // not there when the plan was made.
    let audit = plan
        .test
        .audit
        .as_ref()
        .map_or(Path::new("audit.config"), |a| a.path.as_path());
    let audit = c_path("--audit-config", audit)?;
    let outdir = c_path("--output-dir", &plan.output.dir)?;
    let test = Test {
        model: model.as_ptr(),
        scenario: scenario_number(plan.test.scenario),
        mode: plan.test.mode.map_or(-1, |m| mode_number(m) as c_int),
        user_conf: user_conf.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        audit_config: audit.as_ptr(),
        outdir: outdir.as_ptr(),
        enable_trace: c_int::from(plan.output.trace),
        null_sut: c_int::from(harness.sut.is_none()),
    };
    let mut err = vec![0 as c_char; 1024];
    // The official LoadGen goes on when a log write fails: the disk is
    // watched instead, and a run whose disk fills ends as a failed one.
    let reserve = Reserve::hold(plan.output.extras.join(RESERVE_FILE)).with_context(|| {
        format!(
            "cannot hold the disk reserve in {}",
            plan.output.extras.display()
        )
    })?;
    let failed_dir = plan.output.dir.clone();
    let watch = DiskWatch::start(plan.output.dir.clone(), reserve, move |reason| {
        end_failed_run(&failed_dir, &reason)
    });
    // The bound and percentile the official LoadGen judges by, read from
    // the same files: only for the progress line.
    let progress = harness.sut.as_ref().map(|s| {
        Progress::network(
            s.qdl().view(),
            Target::of(&plan.test.settings),
            loading,
            plan.observe.progress_interval,
        )
    });
    // SAFETY: every pointer in `callbacks` and `test` lives until this call
    // returns; `err` is writable for its length.
    let rc = unsafe { lgn_start_test(&callbacks, &test, err.as_mut_ptr(), err.len()) };
    drop(watch);
    drop(progress);
    if rc != 0 {
        // SAFETY: the adapter NUL-terminates within the buffer.
        let msg = unsafe { CStr::from_ptr(err.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        bail!("{msg}");
    }

    let summary = plan.output.dir.join("mlperf_log_summary.txt");
    if let Ok(text) = std::fs::read_to_string(&summary) {
        print!("{text}");
    }
    // A failed run never gets here: `OfficialLoadGen::failed` ended the
    // process.
    let Harness { sut, .. } = harness;
    let view = sut.as_ref().map(|s| s.qdl().view());
    if let Some(sut) = &sut {
        println!("\nNetwork SUT (not part of the official logs):");
        for (k, v) in sut.qdl().report() {
            println!("  {k}: {v}");
        }
    }
    let exit = observers.finish(plan, view.as_ref(), false)?;
    if let Some(sut) = sut {
        sut.finish();
    }
    let _ = std::io::stdout().flush();
    Ok(exit)
}

/// The logs of a failed run (complete or not) are renamed so that no tool
/// takes them for a result, and the reason is written beside them.
fn mark_failed(dir: &Path, reason: &str) -> Result<()> {
    for name in [
        "mlperf_log_summary.txt",
        "mlperf_log_detail.txt",
        "mlperf_log_accuracy.json",
        "mlperf_log_trace.json",
    ] {
        let from = dir.join(name);
        if from.exists() {
            let to = dir.join(format!("{name}.failed-run"));
            std::fs::rename(&from, &to)
                .with_context(|| format!("cannot rename {}", from.display()))?;
        }
    }
    let note = dir.join("RUN_FAILED.txt");
    std::fs::write(&note, format!("{reason}\n"))
        .with_context(|| format!("cannot write {}", note.display()))?;
    eprintln!(
        "loadgen-node: the official LoadGen's logs of this failed run were renamed *.failed-run; \
         the reason is in {}",
        note.display()
    );
    Ok(())
}

/// mlperf::TestScenario's values.
fn scenario_number(scenario: Scenario) -> c_int {
    match scenario {
        Scenario::SingleStream => 0,
        Scenario::MultiStream => 1,
        Scenario::Server => 2,
        Scenario::Offline => 3,
    }
}

/// mlperf::TestMode's values.
fn mode_number(mode: TestMode) -> u8 {
    match mode {
        TestMode::SubmissionRun => 0,
        TestMode::AccuracyOnly => 1,
        TestMode::PerformanceOnly => 2,
        TestMode::FindPeakPerformance => 3,
    }
}
