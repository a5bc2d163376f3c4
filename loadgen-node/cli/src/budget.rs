//! What a run needs of its host, worked out before anything connects:
//! memory for the samples its QSL holds at once and for the test's
//! bookkeeping of the samples it plans, and room on the output directory's
//! filesystem for every log it can write. A run that cannot fit is refused
//! with both figures and the flag or setting that lowers its need.
//!
//! The host is read here ([`HostMemory::read`], the engine's
//! [`free_bytes`]) and handed to the checks, so a test can hand in a small
//! one; the engine's footprint ([`Footprint`]) counts the samples and log
//! entries from the same settings, loadable sets and query plans the test
//! will use.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use loadgen_engine::disk::{free_bytes, Reserve, RESERVE_BYTES};
use loadgen_engine::footprint::{Footprint, LogBytes};

/// The reserve file of a run (see `loadgen_engine::disk::Reserve`), in its
/// extras directory: beside the logs of a single run, outside a submission
/// plan's tree.
pub const RESERVE_FILE: &str = ".loadgen-node-disk-reserve";

/// The memory of the host, as far as this process may use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostMemory {
    /// `MemTotal`, or the cgroup's limit where it is lower.
    pub total: u64,
    /// What can be allocated now without swapping: `MemAvailable`, or
    /// what the cgroup's limit leaves where that is less.
    pub available: u64,
    /// `total` is the cgroup's limit, not the machine's memory.
    pub cgroup_limit: bool,
}

/// A cgroup's memory figures (v2: memory.max, memory.current and
/// memory.stat's inactive_file; v1: their `memory.*_in_bytes` and
/// `total_inactive_file`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cgroup {
    pub(crate) limit: u64,
    pub(crate) usage: u64,
    /// Page cache the kernel reclaims before the limit bites.
    pub inactive_file: u64,
}

/// A limit this large is no limit (cgroup v1 writes 2^63 rounded to pages).
const NO_LIMIT: u64 = 1 << 60;

impl HostMemory {
    /// This host's memory: /proc/meminfo, and the limit of this process's
    /// memory cgroup when it has one. `None` where /proc cannot be read.
    pub fn read() -> Option<HostMemory> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        HostMemory::from_meminfo(&meminfo, read_cgroup())
    }

    /// From the text of /proc/meminfo and the cgroup's figures.
    pub fn from_meminfo(meminfo: &str, cgroup: Option<Cgroup>) -> Option<HostMemory> {
        let kib = |key: &str| {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
                .map(|k| k.saturating_mul(1024))
        };
        let total = kib("MemTotal")?;
        let available = kib("MemAvailable").unwrap_or(total);
        let mut host = HostMemory {
            total,
            available,
            cgroup_limit: false,
        };
        if let Some(c) = cgroup.filter(|c| c.limit < NO_LIMIT) {
            let used = c.usage.saturating_sub(c.inactive_file);
            host.available = host.available.min(c.limit.saturating_sub(used));
            if c.limit < host.total {
                host.total = c.limit;
                host.cgroup_limit = true;
            }
        }
        Some(host)
    }
}

/// The memory figures of this process's cgroup, v2 or v1; `None` without
/// a limit to read.
fn read_cgroup() -> Option<Cgroup> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let number = |p: PathBuf| -> Option<u64> {
        let text = std::fs::read_to_string(p).ok()?;
        match text.trim() {
            "max" => Some(u64::MAX),
            t => t.parse().ok(),
        }
    };
    let stat = |p: PathBuf, key: &str| -> u64 {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
            })
            .unwrap_or(0)
    };
    // Each place the cgroup may be seen from: its own path under the
    // mount, or the mount's root (inside a container's cgroup namespace).
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        let (base, limit, usage, inactive) = match controllers {
            "" => (
                "/sys/fs/cgroup",
                "memory.max",
                "memory.current",
                "inactive_file",
            ),
            c if c.split(',').any(|c| c == "memory") => (
                "/sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "total_inactive_file",
            ),
            _ => continue,
        };
        for dir in [Path::new(base).join(path), PathBuf::from(base)] {
            if let (Some(limit), Some(usage)) = (number(dir.join(limit)), number(dir.join(usage))) {
                return Some(Cgroup {
                    limit,
                    usage,
                    inactive_file: stat(dir.join("memory.stat"), inactive),
                });
            }
        }
    }
    None
}

/// Memory loadgen-node takes besides the samples and the test's
/// bookkeeping: its runtime, the QDL's buffers, the logs' queues.
pub const PROCESS_BYTES: u64 = 256 << 20;

/// Bytes the QSL keeps for each sample of the data set, loaded or not.
pub const QSL_SLOT_BYTES: u64 = 64;

/// What one run needs, with what the messages say about it.
#[derive(Clone, Debug)]
pub struct RunNeeds {
    pub(crate) footprint: Footprint,
    /// Memory besides the footprint's: [`PROCESS_BYTES`], the QSL's slots
    /// and a few answers on their way (WAN-2.2's are 450 MB each).
    pub process_bytes: u64,
    /// The logs of the run itself.
    pub logs: LogBytes,
    /// Each logged answer's bytes, as counted (the benchmark's answer).
    pub answer_bytes: u64,
    /// Copies of the accuracy log the command keeps besides it (a
    /// submission plan's `accuracy_logs_full`).
    pub accuracy_copies: u64,
    /// Free space the run must leave: an official run is ended below
    /// [`DiskWatch::FLOOR`].
    pub disk_floor: u64,
    /// How the messages name what lowers the need.
    pub levers: Levers,
}

/// What lowers a run's need, for the messages.
#[derive(Clone, Debug, Default)]
pub struct Levers {
    /// The benchmark, as the run names it.
    pub model: String,
    /// The samples held at once come from `performance_sample_count_override`
    /// (mlperf.conf, user.conf or --set), not from the QSL's count.
    pub performance_override: bool,
    /// The samples a submission of this benchmark must hold at once (the
    /// checker's performance sample count), when it is in the suite.
    pub submission_samples: Option<u64>,
    /// The data set is synthetic: `--sample-bytes` changes its size.
    pub synthetic: bool,
}

impl RunNeeds {
    /// What loadgen-node takes besides the samples and the bookkeeping,
    /// for a data set of `total` samples and answers of `answer_bytes`.
    pub fn process_bytes(total: usize, answer_bytes: u64) -> u64 {
        PROCESS_BYTES
            .saturating_add(QSL_SLOT_BYTES.saturating_mul(total as u64))
            .saturating_add(answer_bytes.saturating_mul(4))
    }

    /// Bytes of memory the run needs.
    pub fn memory(&self) -> u64 {
        self.footprint
            .memory_bytes()
            .saturating_add(self.process_bytes)
    }

    /// Bytes of disk the run needs: its logs, the copies the command makes
    /// of its accuracy log, and the reserve held for the logs' last records
    /// should the disk fill anyway.
    pub fn disk(&self) -> u64 {
        self.logs
            .total()
            .saturating_add(self.logs.accuracy.saturating_mul(self.accuracy_copies))
            .saturating_add(RESERVE_BYTES)
            .saturating_add(self.disk_floor)
    }
}

/// Refuses a run whose memory need is more than `host` has available now.
pub fn check_memory(needs: &RunNeeds, host: &HostMemory) -> Result<(), String> {
    let need = needs.memory();
    if need <= host.available {
        return Ok(());
    }
    let fp = &needs.footprint;
    let per_sample = fp.loaded_bytes.checked_div(fp.loaded_samples).unwrap_or(0);
    let bookkeeping = fp.memory_bytes() - fp.loaded_bytes;
    let rest = need - fp.loaded_bytes;
    let mut text = format!(
        "the run does not fit in this host's memory: its QSL holds {} samples at once ({}{}), \
         the test keeps track of {} planned samples ({} of bookkeeping) and loadgen-node \
         takes {} besides, {} in all; this host has {} of memory{}, {} of it available now.",
        grouped(fp.loaded_samples),
        size(fp.loaded_bytes),
        match per_sample {
            0 => String::new(),
            b => format!(", {} bytes each", grouped(b)),
        },
        grouped(fp.planned_samples),
        size(bookkeeping),
        size(needs.process_bytes),
        size(need),
        size(host.total),
        match host.cgroup_limit {
            true => " (its cgroup's limit)",
            false => "",
        },
        size(host.available),
    );
    let levers = &needs.levers;
    if per_sample > 0 && fp.loaded_bytes >= bookkeeping {
        let fit = host.available.saturating_sub(rest) / per_sample;
        let flag = match levers.performance_override {
            true => "--set performance_sample_count_override=N",
            false => "--performance-sample-count N",
        };
        text.push_str(&format!(
            " Hold fewer samples at once with {flag} (at most {} fit",
            grouped(fit)
        ));
        match levers.submission_samples {
            Some(required) if required > fit => text.push_str(&format!(
                "; a {} submission needs {}, which takes a host with {} available: this one \
                 serves development runs only",
                levers.model,
                grouped(required),
                size(required.saturating_mul(per_sample).saturating_add(rest)),
            )),
            _ => {}
        }
        text.push(')');
        if levers.synthetic {
            text.push_str(
                ", or send smaller synthetic samples with --sample-bytes N (development only: \
                 the benchmark's own samples are that size)",
            );
        }
        text.push('.');
    } else {
        text.push_str(
            " Plan fewer samples: lower min_query_count, or target_qps or min_duration (an \
             Offline query holds 1.1 x target_qps x min_duration samples at once), with --set \
             or the user.conf.",
        );
    }
    Err(text)
}

/// Refuses a run whose logs can grow past the `free` bytes of the
/// filesystem that holds `dir`.
pub fn check_disk(needs: &RunNeeds, dir: &Path, free: u64) -> Result<(), String> {
    let need = needs.disk();
    if need <= free {
        return Ok(());
    }
    let fp = &needs.footprint;
    let logs = &needs.logs;
    let mut parts = Vec::new();
    if fp.logged_samples > 0 {
        parts.push(format!(
            "mlperf_log_accuracy.json {} ({} answers of {} bytes, in hex)",
            size(logs.accuracy),
            grouped(fp.logged_samples),
            grouped(needs.answer_bytes)
        ));
    }
    if fp.logged_samples > 0 && needs.accuracy_copies > 0 {
        parts.push(format!(
            "its full copy kept beside the tree {}",
            size(logs.accuracy.saturating_mul(needs.accuracy_copies))
        ));
    }
    if logs.trace > 0 {
        parts.push(format!(
            "mlperf_log_trace.json {} ({} samples)",
            size(logs.trace),
            grouped(fp.issued_samples)
        ));
    }
    parts.push(format!(
        "the other logs and the room kept for their last records {}",
        size(
            logs.others
                .saturating_add(RESERVE_BYTES)
                .saturating_add(needs.disk_floor)
        )
    ));
    let mut ways = vec!["write them where there is room (--output-dir)".to_string()];
    if logs.trace > logs.accuracy {
        ways.push("drop the trace (--no-trace)".into());
    }
    if logs.accuracy >= logs.trace {
        ways.push(
            "log fewer answers (an accuracy run logs every sample of the data set: \
             --total-sample-count or --set accuracy_sample_count_override=N, for development)"
                .into(),
        );
    }
    Err(format!(
        "the run's logs do not fit on the disk: they can reach {} ({}), and the filesystem of \
         {} has {} free. {}.",
        size(need),
        parts.join(", "),
        dir.display(),
        size(free),
        capitalized(&ways.join(", or "))
    ))
}

/// Refuses the runs a plan still has to make, `steps` (what each is, and
/// its needs), before the first of them: any run that does not fit this
/// host's memory (`memory`), and all their logs, and the copies the plan
/// keeps, past the `free` bytes of the filesystem of the plan's tree,
/// `root`.
pub fn check_plan(
    steps: &[(String, RunNeeds)],
    memory: Option<&HostMemory>,
    root: &Path,
    free: u64,
) -> Result<(), String> {
    if let Some(memory) = memory {
        for (what, needs) in steps {
            check_memory(needs, memory).map_err(|e| format!("{what}: {e}"))?;
        }
    }
    // The room kept for the last records is needed once, not per run.
    let kept = steps
        .iter()
        .map(|(_, n)| RESERVE_BYTES.saturating_add(n.disk_floor))
        .max()
        .unwrap_or(0);
    let logs = |n: &RunNeeds| n.disk().saturating_sub(RESERVE_BYTES + n.disk_floor);
    let need = steps
        .iter()
        .fold(kept, |sum, (_, n)| sum.saturating_add(logs(n)));
    if need <= free {
        return Ok(());
    }
    let mut largest: Vec<&(String, RunNeeds)> = steps.iter().collect();
    largest.sort_by_key(|(_, n)| std::cmp::Reverse(logs(n)));
    let shown: Vec<String> = largest
        .iter()
        .take(3)
        .map(|(what, n)| format!("{what} {}", size(logs(n))))
        .collect();
    Err(format!(
        "the plan's {} runs still to be made do not fit on the disk: their logs, with the \
         copies the plan keeps, can reach {} (the largest: {}), and the filesystem of {} has {} \
         free. Put the plan's output where there is room, leave out the runs that do not fit, \
         or, where the nodes answer less than the benchmark's answers, say so with \
         --max-answer-bytes in run_flags.",
        steps.len(),
        size(need),
        shown.join(", "),
        root.display(),
        size(free)
    ))
}

/// Refuses a run that does not fit this host: memory first, then the disk
/// of `dir` (read now).
pub fn check_host(needs: &RunNeeds, dir: &Path) -> Result<(), String> {
    if let Some(memory) = HostMemory::read() {
        check_memory(needs, &memory)?;
    }
    match free_bytes(dir) {
        Ok(free) => check_disk(needs, dir, free),
        Err(e) => Err(format!(
            "cannot read the free space of {}: {e}",
            dir.display()
        )),
    }
}

/// Watches the free space of a run's output filesystem, for an engine whose
/// log writes cannot be seen: the official LoadGen's logger goes on,
/// silently, once a write fails. When less than [`DiskWatch::FLOOR`] is
/// left, it gives the reserve back and calls `full` with the reason, once.
pub struct DiskWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DiskWatch {
    /// Free space below which a watched run is ended: a few of the logger's
    /// writes, at the rate a large accuracy log is written.
    pub const FLOOR: u64 = 4 << 20;

    /// How often the free space is read (a statvfs call).
    const EVERY: Duration = Duration::from_millis(20);

    /// Watches the filesystem of `dir` until dropped.
    pub fn start(
        dir: PathBuf,
        reserve: Reserve,
        full: impl FnOnce(String) + Send + 'static,
    ) -> DiskWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match free_bytes(&dir) {
                    Ok(free) if free < Self::FLOOR => {
                        reserve.release();
                        full(format!(
                            "the disk is full: the filesystem of {} has {} free, less than the \
                             {} a run must leave; the logs end where the official LoadGen had \
                             written them (free space there, or write the logs elsewhere with \
                             --output-dir)",
                            dir.display(),
                            size(free),
                            size(Self::FLOOR)
                        ));
                        return;
                    }
                    _ => thread::sleep(Self::EVERY),
                }
            }
        });
        DiskWatch {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for DiskWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// `n` with its thousands separated: 349,823.
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes for people, in decimal units: 34.5 GB.
pub fn size(n: u64) -> String {
    let units = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    let x = n as f64;
    for (scale, unit) in units {
        if x >= scale {
            return format!("{:.1} {unit}", x / scale);
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn host_memory_is_read_from_meminfo_and_the_cgroup() {
        let meminfo = "MemTotal:       24683568 kB\nMemFree:        12757124 kB\n\
                       MemAvailable:   23589952 kB\n";
        let host = HostMemory::from_meminfo(meminfo, None).unwrap();
        assert_eq!(host.total, 24_683_568 * 1024);
        assert_eq!(host.available, 23_589_952 * 1024);
        assert!(!host.cgroup_limit);
        // A container's cgroup of 8 GiB, 5 GiB used of which 1 GiB is
        // reclaimable page cache.
        let limited = Cgroup {
            limit: 8 * GIB,
            usage: 5 * GIB,
            inactive_file: GIB,
        };
        let host = HostMemory::from_meminfo(meminfo, Some(limited)).unwrap();
        assert_eq!((host.total, host.available), (8 * GIB, 4 * GIB));
        assert!(host.cgroup_limit);
        // No limit (v1's 2^63 rounded to pages, v2's "max").
        let unlimited = Cgroup {
            limit: 9_223_372_036_854_771_712,
            ..limited
        };
        assert_eq!(
            HostMemory::from_meminfo(meminfo, Some(unlimited))
                .unwrap()
                .total,
            24_683_568 * 1024
        );
        assert_eq!(HostMemory::from_meminfo("nothing\n", None), None);
    }

    fn dlrm_v3(samples: u64) -> RunNeeds {
        RunNeeds {
            footprint: Footprint {
                loaded_samples: samples,
                loaded_bytes: samples * 98_752,
                planned_samples: samples + 25_000,
                issued_samples: 25_000,
                issued_queries: 25_000,
                logged_samples: 0,
            },
            process_bytes: RunNeeds::process_bytes(349_823, 8192),
            logs: LogBytes {
                accuracy: 4,
                trace: 0,
                others: 512 << 10,
            },
            answer_bytes: 8192,
            accuracy_copies: 0,
            disk_floor: 0,
            levers: Levers {
                model: "dlrm-v3".into(),
                submission_samples: Some(349_823),
                synthetic: true,
                ..Levers::default()
            },
        }
    }

    #[test]
    fn a_loaded_set_larger_than_the_memory_available_is_refused_with_the_figures() {
        let host = HostMemory {
            total: 24_683_568 * 1024,
            available: 23_589_952 * 1024,
            cgroup_limit: false,
        };
        let e = check_memory(&dlrm_v3(349_823), &host).unwrap_err();
        for part in [
            "holds 349,823 samples at once (34.5 GB, 98,752 bytes each)",
            "loadgen-node takes 290.9 MB besides, 34.9 GB in all",
            "this host has 25.3 GB of memory, 24.2 GB of it available now",
            "--performance-sample-count N (at most 241,",
            "a dlrm-v3 submission needs 349,823, which takes a host with 34.9 GB available",
            "--sample-bytes N",
        ] {
            assert!(e.contains(part), "{part:?} in {e}");
        }
        // What fits, fits; a small host handed in refuses it.
        check_memory(&dlrm_v3(200_000), &host).unwrap();
        let small = HostMemory {
            total: 8 * GIB,
            available: 6 * GIB,
            cgroup_limit: true,
        };
        let e = check_memory(&dlrm_v3(200_000), &small).unwrap_err();
        assert!(e.contains("8.6 GB of memory (its cgroup's limit)"), "{e}");
        // From mlperf.conf's override, the setting is named instead.
        let mut over = dlrm_v3(349_823);
        over.levers.performance_override = true;
        let e = check_memory(&over, &host).unwrap_err();
        assert!(
            e.contains("--set performance_sample_count_override=N"),
            "{e}"
        );
    }

    #[test]
    fn a_plan_of_too_many_samples_names_the_settings_that_plan_them() {
        // An Offline query of 1.7e8 samples: 21.8 GB of bookkeeping.
        let needs = RunNeeds {
            footprint: Footprint {
                loaded_samples: 1024,
                loaded_bytes: 1024 * 64,
                planned_samples: 170_000_000,
                ..Footprint::default()
            },
            ..dlrm_v3(0)
        };
        let host = HostMemory {
            total: 24 * GIB,
            available: 20 * GIB,
            cgroup_limit: false,
        };
        let e = check_memory(&needs, &host).unwrap_err();
        assert!(
            e.contains("170,000,000 planned samples (21.8 GB of bookkeeping)")
                && e.contains("lower min_query_count, or target_qps or min_duration"),
            "{e}"
        );
    }

    #[test]
    fn logs_larger_than_the_free_space_are_refused_with_both_figures() {
        // stable-diffusion-xl's accuracy run: 5,000 images of 3,145,728
        // bytes, and the copy a submission plan keeps.
        let entry = 2 * 3_145_728 + 100;
        let needs = RunNeeds {
            footprint: Footprint {
                logged_samples: 5000,
                issued_samples: 5000,
                ..Footprint::default()
            },
            logs: LogBytes {
                accuracy: 5000 * entry,
                trace: 0,
                others: 512 << 10,
            },
            answer_bytes: 3_145_728,
            process_bytes: 0,
            accuracy_copies: 1,
            disk_floor: 0,
            levers: Levers::default(),
        };
        let dir = Path::new("/data/run");
        let e = check_disk(&needs, dir, 40_000_000_000).unwrap_err();
        for part in [
            "they can reach 62.9 GB",
            "mlperf_log_accuracy.json 31.5 GB (5,000 answers of 3,145,728 bytes, in hex)",
            "its full copy kept beside the tree 31.5 GB",
            "the filesystem of /data/run has 40.0 GB free",
            "Write them where there is room (--output-dir)",
        ] {
            assert!(e.contains(part), "{part:?} in {e}");
        }
        check_disk(&needs, dir, 70_000_000_000).unwrap();
        // A trace larger than the rest: dropping it is the way out.
        let traced = RunNeeds {
            logs: LogBytes {
                accuracy: 4,
                trace: 5_000_000_000,
                others: 512 << 10,
            },
            ..needs
        };
        let e = check_disk(&traced, dir, 1_000_000).unwrap_err();
        assert!(
            e.contains("--no-trace") && !e.contains("log fewer answers"),
            "{e}"
        );
    }

    #[test]
    fn figures_read_as_people_write_them() {
        assert_eq!(grouped(349_823), "349,823");
        assert_eq!(grouped(98), "98");
        assert_eq!(grouped(1_000_000), "1,000,000");
        assert_eq!(size(34_545_720_896), "34.5 GB");
        assert_eq!(size(999), "999 bytes");
        assert_eq!(size(1_048_576), "1.0 MB");
    }
}
