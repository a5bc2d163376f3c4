//! Each sample's latency in a side file, `mlperf_net_latencies.bin`, never
//! in the four MLPerf logs: what `loadgen-node compare` needs for intervals
//! from one run. Written by the aggregator thread, which sees every
//! completion already, so that the issuing and completing threads do no
//! more than before; a record is a few varints appended to a buffer that
//! is written out 256 KiB at a time.
//!
//! The format (all integers LEB128 varints; `zigzag` maps a signed value
//! to an unsigned one, 0, -1, 1, -2... to 0, 1, 2, 3...):
//!
//! ```text
//! file   := "MLPNLAT1"  varint(len) benchmark-utf8  series*
//! series := 'S'  kind  scenario  flags  varint(samples_per_query)  sample*
//!           kind: 0 accuracy, 1 performance
//!           scenario: 0 SingleStream, 1 MultiStream, 2 Server, 3 Offline
//!           flags: bit 0 set when samples carry token timings
//! sample := 'R'  zigzag(scheduled_ns - previous sample's scheduled_ns)
//!                varint(latency_ns)  zigzag(query_seq - previous query_seq)
//!                [tokens: varint(first_token_ns - scheduled_ns + 1, 0: none)
//!                         zigzag(n_tokens)]
//! ```
//!
//! Samples are in completion order; "previous" starts at 0 in each series.
//! Times are nanoseconds on the run's monotonic clock since the test
//! started. A run that was killed leaves a file whose last record may be
//! cut: the reader keeps the complete ones and says so. Typical records
//! are 8 to 10 bytes (a Server run at 100,000 samples/s writes about 1 MB/s).

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::settings::Scenario;

/// The side file's name beside the MLPerf logs (or in the extras directory
/// of the harness that runs the engine).
pub const FILE: &str = "mlperf_net_latencies.bin";

const MAGIC: &[u8; 8] = b"MLPNLAT1";
const SERIES: u8 = b'S';
const SAMPLE: u8 = b'R';
/// Bytes gathered before they are handed to the file.
const BUFFER: usize = 256 << 10;

/// Where the side file goes, and the benchmark it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatencyFileSettings {
    /// The file (created, or replaced).
    pub path: PathBuf,
    /// The benchmark's name, as the harness knows it (the MLPerf logs do
    /// not name it).
    pub benchmark: String,
}

/// One completed sample as the side file holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleRecord {
    /// When the sample was due, ns since the test started.
    pub scheduled_ns: i64,
    /// Completion minus `scheduled_ns`.
    pub latency_ns: i64,
    /// The query the sample belongs to (MultiStream: its query's latency is
    /// its slowest sample's).
    pub query_seq: u64,
    /// First token minus `scheduled_ns`, for token runs that report one.
    pub first_token_ns: Option<i64>,
    /// Tokens of the answer (token runs; 0 otherwise).
    pub n_tokens: i64,
}

/// What a series was run for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeriesKind {
    /// An accuracy series (every sample once).
    Accuracy,
    /// A performance series (the one a result is computed from).
    Performance,
}

/// One series of the file and its samples, in completion order.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesRecords {
    /// Accuracy or performance.
    pub kind: SeriesKind,
    /// The series' scenario.
    pub scenario: Scenario,
    /// Samples per query (MultiStream's queries, Offline's one query).
    pub samples_per_query: u64,
    /// Whether samples carry token timings.
    pub tokens: bool,
    /// The samples.
    pub samples: Vec<SampleRecord>,
}

/// A side file read back.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyFile {
    /// The benchmark the harness named.
    pub benchmark: String,
    /// Every series of the test, in order.
    pub series: Vec<SeriesRecords>,
    /// The file ended inside a record (a run that was killed): the records
    /// before it are kept.
    pub truncated: bool,
}

impl LatencyFile {
    /// The last performance series (the result's, but for
    /// FindPeakPerformance, whose result may be an earlier series').
    pub fn performance(&self) -> Option<&SeriesRecords> {
        self.series
            .iter()
            .rev()
            .find(|s| s.kind == SeriesKind::Performance)
    }
}

/// Why a side file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LatencyFileError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: io::Error,
    },
    /// The file is not in the format above.
    #[error("{path}: not a latency side file: {why} at byte {offset}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        why: String,
        /// Where.
        offset: u64,
    },
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn scenario_code(s: Scenario) -> u8 {
    match s {
        Scenario::SingleStream => 0,
        Scenario::MultiStream => 1,
        Scenario::Server => 2,
        Scenario::Offline => 3,
    }
}

/// One record being encoded: five varints of at most 10 bytes and a tag.
struct Record {
    bytes: [u8; 51],
    len: usize,
}

impl Default for Record {
    fn default() -> Self {
        Record {
            bytes: [0; 51],
            len: 0,
        }
    }
}

impl Record {
    fn byte(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }
}

/// Writes the side file; the aggregator thread's only addition. After the
/// first write error it writes nothing more and keeps the error.
pub(crate) struct LatencyWriter {
    out: Option<Box<dyn Write + Send>>,
    buf: Vec<u8>,
    tokens: bool,
    prev_scheduled_ns: i64,
    prev_query_seq: u64,
    error: Option<io::Error>,
}

impl LatencyWriter {
    /// Creates the file and writes its header.
    pub(crate) fn create(settings: &LatencyFileSettings) -> io::Result<Self> {
        let file = File::create(&settings.path)?;
        Ok(Self::new(Box::new(file), &settings.benchmark))
    }

    pub(crate) fn new(out: Box<dyn Write + Send>, benchmark: &str) -> Self {
        let mut buf = Vec::with_capacity(BUFFER + 64);
        buf.extend_from_slice(MAGIC);
        put_varint(&mut buf, benchmark.len() as u64);
        buf.extend_from_slice(benchmark.as_bytes());
        Self {
            out: Some(out),
            buf,
            tokens: false,
            prev_scheduled_ns: 0,
            prev_query_seq: 0,
            error: None,
        }
    }

    /// A series starts: its header; the samples that follow are its own.
    pub(crate) fn begin_series(
        &mut self,
        kind: SeriesKind,
        scenario: Scenario,
        samples_per_query: u64,
        tokens: bool,
    ) {
        self.tokens = tokens;
        self.prev_scheduled_ns = 0;
        self.prev_query_seq = 0;
        self.buf.push(SERIES);
        self.buf.push(match kind {
            SeriesKind::Accuracy => 0,
            SeriesKind::Performance => 1,
        });
        self.buf.push(scenario_code(scenario));
        self.buf.push(u8::from(tokens));
        put_varint(&mut self.buf, samples_per_query);
        self.spill();
    }

    /// One completed sample: encoded on the stack, appended in one copy.
    pub(crate) fn sample(&mut self, r: &SampleRecord) {
        let mut rec = Record::default();
        rec.byte(SAMPLE);
        rec.varint(zigzag(r.scheduled_ns.wrapping_sub(self.prev_scheduled_ns)));
        rec.varint(r.latency_ns.max(0) as u64);
        rec.varint(zigzag(r.query_seq.wrapping_sub(self.prev_query_seq) as i64));
        if self.tokens {
            rec.varint(r.first_token_ns.map_or(0, |t| t.max(0) as u64 + 1));
            rec.varint(zigzag(r.n_tokens));
        }
        self.buf.extend_from_slice(&rec.bytes[..rec.len]);
        self.prev_scheduled_ns = r.scheduled_ns;
        self.prev_query_seq = r.query_seq;
        self.spill();
    }

    fn spill(&mut self) {
        if self.buf.len() >= BUFFER {
            self.write_out();
        }
    }

    fn write_out(&mut self) {
        if let Some(out) = self.out.as_mut() {
            if let Err(e) = out.write_all(&self.buf) {
                self.error = Some(e);
                self.out = None;
            }
        }
        self.buf.clear();
    }

    /// Writes what is left and closes the file; the first error, if any.
    pub(crate) fn finish(mut self) -> Option<io::Error> {
        self.write_out();
        if let Some(mut out) = self.out.take() {
            if let Err(e) = out.flush() {
                self.error.get_or_insert(e);
            }
        }
        self.error
    }
}

/// The reader's position in the file, for errors.
struct Input<R> {
    inner: R,
    offset: u64,
}

/// A read that found the end of the file where a record was due (`None`
/// at a record boundary) or inside one.
enum End {
    Clean,
    Cut,
}

impl<R: Read> Input<R> {
    fn byte(&mut self) -> io::Result<Option<u8>> {
        let mut b = [0u8; 1];
        loop {
            match self.inner.read(&mut b) {
                Ok(0) => return Ok(None),
                Ok(_) => {
                    self.offset += 1;
                    return Ok(Some(b[0]));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// A varint; `Err(None)` at the end of the file.
    fn varint(&mut self) -> io::Result<Result<u64, &'static str>> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let Some(b) = self.byte()? else {
                return Ok(Err("cut"));
            };
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(Ok(v));
            }
        }
        Ok(Err("a varint longer than 64 bits"))
    }
}

/// Reads a side file.
pub fn read(path: &Path) -> Result<LatencyFile, LatencyFileError> {
    let io_err = |source| LatencyFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_err)?;
    let mut input = Input {
        inner: BufReader::with_capacity(1 << 20, file),
        offset: 0,
    };
    let format = |why: &str, offset: u64| LatencyFileError::Format {
        path: path.to_path_buf(),
        why: why.to_string(),
        offset,
    };
    let mut magic = [0u8; 8];
    for b in &mut magic {
        *b = input
            .byte()
            .map_err(io_err)?
            .ok_or_else(|| format("no header", 0))?;
    }
    if &magic != MAGIC {
        return Err(format("no MLPNLAT1 header", 0));
    }
    let len = input
        .varint()
        .map_err(io_err)?
        .map_err(|why| format(why, input.offset))?;
    let mut name = Vec::new();
    for _ in 0..len.min(4096) {
        name.push(
            input
                .byte()
                .map_err(io_err)?
                .ok_or_else(|| format("cut benchmark name", input.offset))?,
        );
    }
    let benchmark = String::from_utf8(name).map_err(|_| format("benchmark name not UTF-8", 8))?;
    let mut out = LatencyFile {
        benchmark,
        series: Vec::new(),
        truncated: false,
    };
    let mut prev_scheduled = 0i64;
    let mut prev_query = 0u64;
    loop {
        let at = input.offset;
        let Some(tag) = input.byte().map_err(io_err)? else {
            break;
        };
        let end = match tag {
            SERIES => {
                let mut head = [0u8; 3];
                let mut cut = false;
                for b in &mut head {
                    match input.byte().map_err(io_err)? {
                        Some(v) => *b = v,
                        None => cut = true,
                    }
                }
                let spq = input.varint().map_err(io_err)?;
                match (cut, spq) {
                    (false, Ok(spq)) => {
                        let kind = match head[0] {
                            0 => SeriesKind::Accuracy,
                            1 => SeriesKind::Performance,
                            _ => return Err(format("unknown series kind", at + 1)),
                        };
                        let scenario = match head[1] {
                            0 => Scenario::SingleStream,
                            1 => Scenario::MultiStream,
                            2 => Scenario::Server,
                            3 => Scenario::Offline,
                            _ => return Err(format("unknown scenario", at + 2)),
                        };
                        out.series.push(SeriesRecords {
                            kind,
                            scenario,
                            samples_per_query: spq,
                            tokens: head[2] & 1 == 1,
                            samples: Vec::new(),
                        });
                        prev_scheduled = 0;
                        prev_query = 0;
                        End::Clean
                    }
                    (_, Err(why)) if why != "cut" => return Err(format(why, at)),
                    _ => End::Cut,
                }
            }
            SAMPLE => {
                let Some(series) = out.series.last_mut() else {
                    return Err(format("a sample before any series", at));
                };
                let mut fields = [0u64; 5];
                let n = if series.tokens { 5 } else { 3 };
                let mut end = End::Clean;
                for f in &mut fields[..n] {
                    match input.varint().map_err(io_err)? {
                        Ok(v) => *f = v,
                        Err("cut") => {
                            end = End::Cut;
                            break;
                        }
                        Err(why) => return Err(format(why, at)),
                    }
                }
                if let End::Clean = end {
                    let scheduled_ns = prev_scheduled.wrapping_add(unzigzag(fields[0]));
                    let query_seq = prev_query.wrapping_add(unzigzag(fields[2]) as u64);
                    let (first_token_ns, n_tokens) = match series.tokens {
                        true => (
                            fields[3].checked_sub(1).map(|v| v as i64),
                            unzigzag(fields[4]),
                        ),
                        false => (None, 0),
                    };
                    series.samples.push(SampleRecord {
                        scheduled_ns,
                        latency_ns: fields[1] as i64,
                        query_seq,
                        first_token_ns,
                        n_tokens,
                    });
                    prev_scheduled = scheduled_ns;
                    prev_query = query_seq;
                }
                end
            }
            _ => return Err(format("unknown record tag", at)),
        };
        if let End::Cut = end {
            out.truncated = true;
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A `Write` whose bytes the test reads back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn sample(scheduled_ns: i64, latency_ns: i64, query_seq: u64) -> SampleRecord {
        SampleRecord {
            scheduled_ns,
            latency_ns,
            query_seq,
            first_token_ns: None,
            n_tokens: 0,
        }
    }

    fn written(f: impl FnOnce(&mut LatencyWriter)) -> Vec<u8> {
        let out = Shared::default();
        let mut w = LatencyWriter::new(Box::new(out.clone()), "resnet50");
        f(&mut w);
        assert!(w.finish().is_none());
        let bytes = out.0.lock().unwrap().clone();
        bytes
    }

    fn read_bytes(bytes: &[u8]) -> Result<LatencyFile, LatencyFileError> {
        let dir = testkit::Scratch::new(&format!("latency-file-{:?}", std::thread::current().id()));
        let path = dir.join(FILE);
        std::fs::write(&path, bytes).unwrap();
        read(&path)
    }

    #[test]
    fn what_is_written_reads_back() {
        let tokens = SampleRecord {
            scheduled_ns: 5_000,
            latency_ns: 9_000_000,
            query_seq: 0,
            first_token_ns: Some(1_000_000),
            n_tokens: 128,
        };
        let bytes = written(|w| {
            w.begin_series(SeriesKind::Accuracy, Scenario::Offline, 3, false);
            for i in 0..3 {
                w.sample(&sample(10, 1_000 + i, 0));
            }
            w.begin_series(SeriesKind::Performance, Scenario::Server, 1, false);
            // Out of schedule order (completion order), large and zero.
            w.sample(&sample(2_000_000_000, 15_000_000, 7));
            w.sample(&sample(1_999_000_000, 0, 6));
            w.sample(&sample(i64::MAX / 2, 600_000_000_000, 8));
            w.begin_series(SeriesKind::Performance, Scenario::Server, 1, true);
            w.sample(&tokens);
            w.sample(&SampleRecord {
                first_token_ns: None,
                n_tokens: -1,
                ..tokens
            });
        });
        let f = read_bytes(&bytes).unwrap();
        assert_eq!(f.benchmark, "resnet50");
        assert!(!f.truncated);
        assert_eq!(f.series.len(), 3);
        assert_eq!(f.series[0].kind, SeriesKind::Accuracy);
        assert_eq!(f.series[0].samples_per_query, 3);
        assert_eq!(f.series[0].samples[2], sample(10, 1_002, 0));
        let perf = &f.series[1];
        assert_eq!(
            (perf.kind, perf.scenario),
            (SeriesKind::Performance, Scenario::Server)
        );
        assert_eq!(
            perf.samples,
            [
                sample(2_000_000_000, 15_000_000, 7),
                sample(1_999_000_000, 0, 6),
                sample(i64::MAX / 2, 600_000_000_000, 8)
            ]
        );
        assert_eq!(f.performance(), Some(&f.series[2]));
        assert_eq!(f.series[2].samples[0], tokens);
        assert_eq!(f.series[2].samples[1].first_token_ns, None);
        assert_eq!(f.series[2].samples[1].n_tokens, -1);
    }

    #[test]
    fn records_are_compact() {
        // Server-like: 1 ms apart, latencies of a few ms, one sample a query.
        let bytes = written(|w| {
            w.begin_series(SeriesKind::Performance, Scenario::Server, 1, false);
            for i in 0..10_000i64 {
                w.sample(&sample(
                    i * 1_000_000,
                    2_000_000 + (i % 97) * 10_000,
                    i as u64,
                ));
            }
        });
        let per_sample = bytes.len() as f64 / 10_000.0;
        assert!(per_sample <= 10.0, "{per_sample} bytes a sample");
    }

    #[test]
    fn a_cut_file_keeps_its_complete_records() {
        let bytes = written(|w| {
            w.begin_series(SeriesKind::Performance, Scenario::SingleStream, 1, false);
            for i in 0..100 {
                w.sample(&sample(i * 3_000_000, 2_500_000, i as u64));
            }
        });
        // Cut inside the last record's latency varint.
        let f = read_bytes(&bytes[..bytes.len() - 2]).unwrap();
        assert!(f.truncated);
        assert_eq!(f.series[0].samples.len(), 99);
        let e = read_bytes(b"MLPNLAT1\x00X").unwrap_err().to_string();
        assert!(e.contains("unknown record tag at byte 9"), "{e}");
        let e = read_bytes(b"not one").unwrap_err().to_string();
        assert!(e.contains("not a latency side file"), "{e}");
        let e = read_bytes(b"MLPNLAT1\x00R\x00\x00\x00")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a sample before any series"), "{e}");
    }

    #[test]
    fn a_failed_write_is_kept_and_stops_the_writing() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut w = LatencyWriter::new(Box::new(Full), "x");
        w.begin_series(SeriesKind::Performance, Scenario::Server, 1, false);
        for i in 0..100_000 {
            w.sample(&sample(i, 1, 0));
        }
        assert!(w.out.is_none(), "stopped at the first error");
        assert_eq!(w.finish().unwrap().to_string(), "disk full");
    }

    /// What one record costs the aggregator thread, beside what it already
    /// spends on each sample's latency histogram, side by side:
    /// `cargo test -p loadgen-engine --release --lib record_cost -- --ignored --nocapture`
    #[test]
    #[ignore = "measurement; run in release with --ignored --nocapture"]
    fn record_cost() {
        let n = 20_000_000i64;
        let records: Vec<SampleRecord> = (0..1024)
            .map(|i| sample(i * 1_000_000, 2_000_000 + (i * 7919) % 500_000, i as u64))
            .collect();
        let mut best = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            let mut w = LatencyWriter::new(Box::new(io::sink()), "x");
            w.begin_series(SeriesKind::Performance, Scenario::Server, 1, false);
            let start = std::time::Instant::now();
            for i in 0..n {
                let mut r = records[(i & 1023) as usize];
                r.scheduled_ns += i * 1_000;
                w.sample(std::hint::black_box(&r));
            }
            let writer = start.elapsed().as_nanos() as f64 / n as f64;
            assert!(w.finish().is_none());
            let mut h = crate::stats::LatencyHistogram::new();
            let start = std::time::Instant::now();
            for i in 0..n {
                h.record(std::hint::black_box(
                    records[(i & 1023) as usize].latency_ns,
                ));
            }
            let histogram = start.elapsed().as_nanos() as f64 / n as f64;
            assert_eq!(h.count(), n as u64);
            best = (best.0.min(writer), best.1.min(histogram));
        }
        println!(
            "side file: {:.1} ns a record; the latency histogram it sits beside: {:.1} ns a sample ({:.2}x)",
            best.0,
            best.1,
            best.0 / best.1
        );
    }
}
