//! The filesystem a test's logs go to, as a budget: its free space
//! ([`free_bytes`]), a [`Reserve`] held for the records that close a test's
//! logs, and the log files of a test, which, when a write finds the disk
//! full, give the reserve back, end the run at once with the reason, and
//! finish that write, so that every log ends with whole records. Also the
//! bounded read of the small text files a run is given ([`read_bounded`]).

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Bytes a test keeps in reserve on its logs' filesystem for the records
/// that close them once the disk has filled: the write under way, the
/// detail log's last records and the summary (tens of KiB), with room.
pub const RESERVE_BYTES: u64 = 1 << 20;

/// The most a run's text inputs may hold (configuration files, node lists,
/// plans): far more than any real one, far less than a host's memory.
pub const MAX_TEXT_FILE: u64 = 4 << 20;

/// Reads `path` whole, but no more than `limit` bytes: a larger file, or one
/// without end (`/dev/zero`, a FIFO fed for ever), is an error of kind
/// `InvalidData` saying so, after at most `limit + 1` bytes read.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let file = File::open(path)?;
    let too_large = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes, the most such a file may hold"),
        )
    };
    if file
        .metadata()
        .is_ok_and(|m| m.is_file() && m.len() > limit)
    {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_text_bounded(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_bounded(path, limit)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()))
}

/// Bytes free for an unprivileged writer on the filesystem holding `path`
/// (statvfs's available blocks), or on that of its nearest existing
/// ancestor: a test's output directory is created when the test starts.
pub fn free_bytes(path: &Path) -> io::Result<u64> {
    let mut at = path;
    while !at.exists() {
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            _ => {
                at = Path::new(".");
                break;
            }
        }
    }
    let c = CString::new(at.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
    // SAFETY: `c` is a NUL-terminated path; `stat` is written by statvfs
    // before it is read, and zeroed memory is a valid `statvfs`.
    let stat = unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut stat) != 0 {
            return Err(io::Error::last_os_error());
        }
        stat
    };
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Whether `e` says that the filesystem (or the user's quota on it) is full.
pub fn is_disk_full(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// A file of [`RESERVE_BYTES`] that holds room on a filesystem until it is
/// released (or dropped): removing it makes room for the last records of
/// logs whose disk has filled.
#[derive(Debug)]
pub struct Reserve {
    path: PathBuf,
    held: Mutex<bool>,
}

impl Reserve {
    /// Creates the reserve file at `path` (its folder must exist) and makes
    /// the filesystem hold its blocks.
    pub fn hold(path: PathBuf) -> io::Result<Reserve> {
        let write = || -> io::Result<()> {
            let mut f = File::create(&path)?;
            // Not zeros: a filesystem that compresses would hold no blocks.
            let block: Vec<u8> = (0..64u32 << 10)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect();
            for _ in 0..RESERVE_BYTES / block.len() as u64 {
                f.write_all(&block)?;
            }
            f.sync_all()
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(Reserve {
            path,
            held: Mutex::new(true),
        })
    }

    /// The reserve file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the file, once; true if this call removed it.
    pub fn release(&self) -> bool {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if !*held {
            return false;
        }
        *held = false;
        let _ = std::fs::remove_file(&self.path);
        true
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        self.release();
    }
}

/// Ends a run, with the reason.
type EndRun = Box<dyn Fn(String) + Send + Sync>;

/// What a test's log files share: the reserve, whether the disk has filled
/// and why, and how to end the run when it does.
#[derive(Default)]
pub(crate) struct Disk {
    reserve: Option<Reserve>,
    full: AtomicBool,
    reason: Mutex<Option<String>>,
    end_run: OnceLock<EndRun>,
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disk")
            .field("reserve", &self.reserve)
            .field("reason", &self.reason())
            .finish()
    }
}

impl Disk {
    pub(crate) fn new(reserve: Option<Reserve>) -> Arc<Disk> {
        Arc::new(Disk {
            reserve,
            ..Disk::default()
        })
    }

    /// How to end the run when the disk fills, once the run exists
    /// (`Completer::abort`); ends it at once if the disk has filled already.
    pub(crate) fn watch(&self, end_run: impl Fn(String) + Send + Sync + 'static) {
        let end_run = self.end_run.get_or_init(|| Box::new(end_run));
        if let Some(reason) = self.reason() {
            end_run(reason);
        }
    }

    /// Whether a write has found the disk full.
    pub(crate) fn is_full(&self) -> bool {
        self.full.load(Ordering::Acquire)
    }

    /// Why the disk filled, once it has.
    pub(crate) fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A write to `path` failed with `e`, the disk full: the first time,
    /// records why, gives the reserve back and ends the run. True when the
    /// write is worth one more try (room was just made).
    fn filled(&self, path: &Path, e: &io::Error) -> bool {
        if self.full.swap(true, Ordering::AcqRel) {
            return false;
        }
        let reason = format!(
            "the disk is full: writing {} failed: {e}; the test ended there, its logs closed \
             after the records written before",
            path.display()
        );
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.clone());
        let room = self.reserve.as_ref().is_some_and(Reserve::release);
        if let Some(end_run) = self.end_run.get() {
            end_run(reason);
        }
        room
    }
}

/// One of a test's log files: a write that finds the disk full tells
/// [`Disk`] and, once the reserve is given back, is tried again.
pub(crate) struct LogFile<W: Write = File> {
    inner: W,
    path: PathBuf,
    disk: Arc<Disk>,
}

impl<W: Write> LogFile<W> {
    pub(crate) fn new(inner: W, path: PathBuf, disk: Arc<Disk>) -> Self {
        Self { inner, path, disk }
    }
}

impl<W: Write> Write for LogFile<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.inner.write(buf) {
            Err(e) if is_disk_full(&e) && self.disk.filled(&self.path, &e) => self.inner.write(buf),
            r => r,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.inner.flush() {
            Err(e) if is_disk_full(&e) && self.disk.filled(&self.path, &e) => self.inner.flush(),
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounded_whatever_the_file() {
        let dir = testkit::Scratch::new("read-bounded");
        let small = dir.path().join("small.conf");
        std::fs::write(&small, b"a = 1\n").unwrap();
        assert_eq!(read_text_bounded(&small, 6).unwrap(), "a = 1\n");
        let e = read_bounded(&small, 5).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("larger than 5 bytes"), "{e}");
        // A file without end: refused after limit + 1 bytes, at once.
        let started = std::time::Instant::now();
        let e = read_bounded(Path::new("/dev/zero"), MAX_TEXT_FILE).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let e = read_text_bounded(Path::new("/dev/zero"), 16).unwrap_err();
        assert!(e.to_string().contains("larger than 16 bytes"), "{e}");
    }

    /// Takes `room` bytes, then reports the disk full; the first time it
    /// does, it grows to `freed` (the room a released reserve makes).
    struct SmallDisk {
        written: Vec<u8>,
        room: usize,
        freed: usize,
    }

    impl Write for SmallDisk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.room - self.written.len());
            if n == 0 && !buf.is_empty() {
                self.room = self.room.max(std::mem::take(&mut self.freed));
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.written.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Records why the run was ended.
    #[derive(Default)]
    struct Run(Mutex<Vec<String>>);

    /// How `disk` ends `run`.
    fn watched(disk: &Disk, run: &Arc<Run>) {
        let run = run.clone();
        disk.watch(move |reason| run.0.lock().unwrap().push(reason));
    }

    fn scratch(name: &str) -> testkit::Scratch {
        testkit::Scratch::new(&format!("loadgen-disk-{name}"))
    }

    #[test]
    fn a_full_disk_ends_the_run_gives_the_reserve_back_and_finishes_the_write() {
        let dir = scratch("full");
        let reserve = Reserve::hold(dir.join("reserve")).unwrap();
        assert_eq!(
            std::fs::metadata(reserve.path()).unwrap().len(),
            RESERVE_BYTES
        );
        let disk = Disk::new(Some(reserve));
        let run = Arc::new(Run::default());
        watched(&disk, &run);
        let mut log = LogFile::new(
            SmallDisk {
                written: Vec::new(),
                room: 10,
                freed: 20,
            },
            PathBuf::from("out/mlperf_log_trace.json"),
            disk.clone(),
        );
        log.write_all(b"0123456789").unwrap();
        assert!(!disk.is_full());
        // The disk fills: the reserve goes, and the write is tried again.
        let n = log.write(b"abc");
        assert!(disk.is_full());
        assert!(!dir.join("reserve").exists(), "the reserve is given back");
        let reason = disk.reason().unwrap();
        assert!(
            reason.contains("out/mlperf_log_trace.json") && reason.contains("os error 28"),
            "{reason}"
        );
        assert_eq!(*run.0.lock().unwrap(), [reason]);
        // This write had room again (the reserve's), so it went through.
        assert_eq!(n.unwrap(), 3);
        // A later failure is an error: there is no more reserve.
        log.write_all(&[b'x'; 7]).unwrap();
        assert!(is_disk_full(&log.write(b"x").unwrap_err()));
        assert_eq!(run.0.lock().unwrap().len(), 1, "the run is ended once");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_reserve_the_write_fails_and_a_run_started_later_ends_at_once() {
        let disk = Disk::new(None);
        let mut log = LogFile::new(
            SmallDisk {
                written: Vec::new(),
                room: 0,
                freed: 0,
            },
            PathBuf::from("detail.txt"),
            disk.clone(),
        );
        assert!(log.write_all(b"x").is_err());
        let run = Arc::new(Run::default());
        watched(&disk, &run);
        assert_eq!(run.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn free_space_is_read_from_the_nearest_folder_that_exists() {
        // The same filesystem (others may write to it meanwhile).
        let missing = free_bytes(Path::new("/tmp/does-not-exist/nor-this")).unwrap();
        let there = free_bytes(Path::new("/tmp")).unwrap();
        assert!(missing.abs_diff(there) < 1 << 30, "{missing} {there}");
        assert!(free_bytes(Path::new("relative/missing")).is_ok());
    }
}
