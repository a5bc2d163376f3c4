//! The Query Sample Library of the LoadGen node: it owns the data set and
//! loads the samples the LoadGen asks for into RAM, untimed, before a series
//! starts, compressing each one on its own with the input codec if there is
//! one. The QDL then sends each sample's stored bytes as they are.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use compression::{CodecSpec, SampleCodec};
use loadgen_engine::sut::SutError;
use loadgen_engine::{QuerySampleIndex, QuerySampleLibrary};
use proto::Codec;
use qdl::StoredSample;

use crate::npy;
use facts::benchmarks::Tensor;

/// Where the samples come from.
#[derive(Clone, Debug)]
pub enum DataSource {
    /// `--dataset DIR`: one entry per sample, in name order.
    NpyDir {
        /// The directory.
        dir: PathBuf,
        /// Its samples, in name order.
        samples: Vec<NpySample>,
    },
    /// Deterministic pseudo-random samples, made at load time: of
    /// `sample_bytes` each, or, when `tensors` names several, in the
    /// multi-tensor layout of those tensors.
    Synthetic {
        /// Bytes of each sample.
        sample_bytes: usize,
        /// Samples in the data set.
        total: usize,
        /// The benchmark's input tensors; several: the multi-tensor layout.
        tensors: &'static [Tensor],
    },
}

/// One sample of a `--dataset` directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NpySample {
    /// A `.npy` file: its array's data is sent (the header is checked and
    /// dropped).
    File(PathBuf),
    /// A folder of `.npy` files, one per tensor: the multi-tensor layout,
    /// each file whole (header included) and back to back in name order, so
    /// that the node can tell the tensors apart.
    Tensors(PathBuf, Vec<PathBuf>),
}

fn is_npy(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "npy")
}

/// The entries of `dir` (sorted by name), files or folders.
fn sorted_entries(dir: &Path, folders: bool) -> Result<Vec<PathBuf>, SutError> {
    let cannot =
        |e: std::io::Error| SutError(format!("cannot read the data set {}: {e}", dir.display()));
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(cannot)? {
        let path = entry.map_err(cannot)?.path();
        match folders {
            true if path.is_dir() => out.push(path),
            false if is_npy(&path) && path.is_file() => out.push(path),
            _ => {}
        }
    }
    out.sort();
    Ok(out)
}

impl DataSource {
    /// The samples of `dir`: its `.npy` files, or its folders of `.npy`
    /// files (one per sample of several tensors), sorted by name.
    pub fn npy_dir(dir: &Path) -> Result<Self, SutError> {
        let files = sorted_entries(dir, false)?;
        let folders = sorted_entries(dir, true)?;
        let samples = match (files.is_empty(), folders.is_empty()) {
            (false, true) => files.into_iter().map(NpySample::File).collect(),
            (true, false) => folders
                .into_iter()
                .map(|f| {
                    let tensors = sorted_entries(&f, false)?;
                    match tensors.is_empty() {
                        true => Err(SutError(format!("{}: no .npy files", f.display()))),
                        false => Ok(NpySample::Tensors(f, tensors)),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?,
            (false, false) => {
                return Err(SutError(format!(
                    "{}: holds both .npy files and folders; a data set is one .npy file per \
                     sample, or one folder of .npy tensors per sample",
                    dir.display()
                )))
            }
            (true, true) => {
                return Err(SutError(format!(
                    "{}: no .npy files (nor folders of them)",
                    dir.display()
                )))
            }
        };
        Ok(DataSource::NpyDir {
            dir: dir.to_path_buf(),
            samples,
        })
    }

    /// A run's data set: the `dataset` directory, or `model`'s synthetic
    /// data set (`sample_bytes` and `total` override the benchmark's).
    /// Errors name the flag.
    pub fn for_run(
        model: &str,
        dataset: Option<&Path>,
        sample_bytes: Option<usize>,
        total: Option<usize>,
    ) -> anyhow::Result<Self> {
        let bench = crate::benchmarks::find(model);
        let source = match dataset {
            Some(dir) => Self::npy_dir(dir).map_err(|e| anyhow::anyhow!("--dataset: {e}"))?,
            None => {
                let total = total.or(bench.map(|b| b.total_samples)).unwrap_or(1024);
                match (sample_bytes, bench) {
                    (Some(sample_bytes), _) => DataSource::Synthetic {
                        sample_bytes,
                        total,
                        tensors: &[],
                    },
                    (None, Some(b)) => DataSource::Synthetic {
                        sample_bytes: b.input_bytes(),
                        total,
                        tensors: match b.input.len() {
                            1 => &[],
                            _ => b.input,
                        },
                    },
                    (None, None) => anyhow::bail!(
                        "--model {model}: not a benchmark this node knows ({}); give --dataset \
                         DIR or --sample-bytes N",
                        crate::benchmarks::names().join(", ")
                    ),
                }
            }
        };
        if source.total() == 0 {
            anyhow::bail!("the data set has no samples");
        }
        if let (Some(n), DataSource::NpyDir { samples, .. }) = (total, &source) {
            if n != samples.len() {
                anyhow::bail!(
                    "--total-sample-count {n} but --dataset has {} samples",
                    samples.len()
                );
            }
        }
        Ok(source)
    }

    /// Samples in the data set.
    pub fn total(&self) -> usize {
        match self {
            DataSource::NpyDir { samples, .. } => samples.len(),
            DataSource::Synthetic { total, .. } => *total,
        }
    }

    /// The bytes sample `index` takes once loaded (uncompressed), at most:
    /// a `.npy` file's size (its header is dropped), a folder's files' sum;
    /// 0 for a sample that is not there (loading it fails anyway).
    pub fn stored_bytes(&self, index: QuerySampleIndex) -> u64 {
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        match self {
            DataSource::NpyDir { samples, .. } => match samples.get(index) {
                Some(NpySample::File(path)) => size(path),
                Some(NpySample::Tensors(_, files)) => files.iter().map(|f| size(f)).sum(),
                None => 0,
            },
            DataSource::Synthetic { sample_bytes, .. } => *sample_bytes as u64,
        }
    }

    /// The bytes of sample `index`, as they will be sent.
    pub fn read(&self, index: QuerySampleIndex) -> Result<Vec<u8>, SutError> {
        let missing = || SutError(format!("sample {index} is not in the data set"));
        match self {
            DataSource::NpyDir { samples, .. } => match samples.get(index).ok_or_else(missing)? {
                NpySample::File(path) => npy::read(path)
                    .map(|a| a.data)
                    .map_err(|e| SutError(e.to_string())),
                NpySample::Tensors(_, files) => {
                    let mut out = Vec::new();
                    for f in files {
                        let bytes = std::fs::read(f)
                            .map_err(|e| SutError(format!("{}: {e}", f.display())))?;
                        // Each must be a whole .npy file: the node splits
                        // the sample by their headers.
                        npy::parse(&bytes).map_err(|e| {
                            SutError(format!("{}: not a .npy file: {e}", f.display()))
                        })?;
                        out.extend_from_slice(&bytes);
                    }
                    Ok(out)
                }
            },
            DataSource::Synthetic {
                sample_bytes,
                total,
                tensors,
            } => {
                if index >= *total {
                    return Err(missing());
                }
                if tensors.is_empty() {
                    return Ok(synthetic_sample(index, *sample_bytes));
                }
                let mut out = Vec::with_capacity(*sample_bytes);
                for (i, t) in tensors.iter().enumerate() {
                    // A stream of its own for each tensor of each sample.
                    let seed = (index as u64) ^ ((i as u64 + 1) << 56);
                    out.extend_from_slice(&npy::encode(
                        t.dtype,
                        t.shape,
                        &synthetic_bytes(seed, t.bytes()),
                    ));
                }
                Ok(out)
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            DataSource::NpyDir { dir, samples } => {
                let several = matches!(samples.first(), Some(NpySample::Tensors(..)));
                let kind = match several {
                    true => "folders of .npy tensors",
                    false => ".npy samples",
                };
                format!("{} ({} {kind})", dir.display(), samples.len())
            }
            DataSource::Synthetic {
                sample_bytes,
                total,
                tensors,
            } => match tensors.len() {
                0 => format!("synthetic ({total} samples of {sample_bytes} bytes)"),
                n => format!("synthetic ({total} samples of {n} tensors, {sample_bytes} bytes)"),
            },
        }
    }
}

/// Sample `index` of the synthetic data set: a splitmix64 stream seeded by
/// the index, so every sample differs and any process can recreate it.
pub fn synthetic_sample(index: QuerySampleIndex, len: usize) -> Vec<u8> {
    synthetic_bytes(index as u64, len)
}

/// `len` bytes of the splitmix64 stream of `seed`.
fn synthetic_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed ^ 0x5851_f42d_4c95_7f2d;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Raw bytes read before they are compressed and stored: loading a set
/// holds its stored samples and at most this much more.
const LOAD_CHUNK: usize = 64 << 20;

/// How far the QSL is in loading a set of samples (minutes for tens of
/// GB), for the progress line.
#[derive(Debug, Default)]
pub struct LoadProgress {
    active: AtomicBool,
    samples: AtomicU64,
    of: AtomicU64,
    bytes: AtomicU64,
}

/// A copy of [`LoadProgress`]: `None` when nothing is loading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loading {
    /// Samples read so far, of `of`.
    pub samples: u64,
    /// Samples to read in all.
    pub of: u64,
    /// Their bytes, as read (before any compression).
    pub bytes: u64,
}

impl LoadProgress {
    fn begin(&self, of: usize) {
        self.samples.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        self.of.store(of as u64, Ordering::Relaxed);
        self.active.store(true, Ordering::Release);
    }

    fn read(&self, bytes: usize) {
        self.samples.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn end(&self) {
        self.active.store(false, Ordering::Release);
    }

    /// What is loading now, if anything.
    pub fn now(&self) -> Option<Loading> {
        self.active.load(Ordering::Acquire).then(|| Loading {
            samples: self.samples.load(Ordering::Relaxed),
            of: self.of.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        })
    }
}

/// A QSL over a [`DataSource`], holding the loaded samples in RAM.
pub struct DataQsl {
    source: DataSource,
    performance: usize,
    input_codec: CodecSpec,
    codec: Box<dyn SampleCodec>,
    /// Loaded samples by index; read on the timed path, written only by
    /// load/unload between series.
    loaded: RwLock<Vec<Option<StoredSample>>>,
    progress: Arc<LoadProgress>,
}

impl DataQsl {
    /// A QSL that stores samples uncompressed.
    pub fn new(source: DataSource, performance: usize) -> Self {
        let total = source.total();
        Self {
            performance: performance.min(total),
            input_codec: CodecSpec::NONE,
            codec: CodecSpec::NONE.codec(),
            loaded: RwLock::new(vec![None; total]),
            source,
            progress: Arc::default(),
        }
    }

    /// How far loading is, for the progress line.
    pub fn progress(&self) -> Arc<LoadProgress> {
        self.progress.clone()
    }

    /// Stores every sample compressed with `spec` (each on its own, at load
    /// time). Whether the benchmark allows it is for the caller to check
    /// (`compression::policy`).
    pub fn with_input_codec(mut self, spec: CodecSpec) -> Self {
        self.input_codec = spec;
        self.codec = spec.codec();
        self
    }

    /// Where the samples come from.
    pub fn source(&self) -> &DataSource {
        &self.source
    }

    /// The codec of every stored sample.
    pub fn input_codec(&self) -> CodecSpec {
        self.input_codec
    }

    /// A loaded sample as stored.
    pub fn loaded(&self, index: QuerySampleIndex) -> Option<StoredSample> {
        self.loaded.read().ok()?.get(index)?.clone()
    }

    /// The stored forms of `raw`, compressed on every core when there is a
    /// codec (loading is untimed, but a data set of gigabytes should not
    /// take minutes).
    fn store(
        &self,
        raw: Vec<(QuerySampleIndex, Vec<u8>)>,
    ) -> Vec<(QuerySampleIndex, StoredSample)> {
        if !self.input_codec.compresses() {
            return raw
                .into_iter()
                .map(|(i, data)| (i, StoredSample::raw(Bytes::from(data))))
                .collect();
        }
        let wire = Codec::from(self.input_codec.kind);
        let codec = self.codec.as_ref();
        let compress = |(i, data): &(QuerySampleIndex, Vec<u8>)| {
            let sample = StoredSample {
                payload: Bytes::from(codec.compress(data)),
                codec: wire,
                raw_len: data.len(),
            };
            (*i, sample)
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(raw.len());
        if threads <= 1 {
            return raw.iter().map(compress).collect();
        }
        let per_thread = raw.len().div_ceil(threads);
        std::thread::scope(|s| {
            let parts: Vec<_> = raw
                .chunks(per_thread)
                .map(|part| s.spawn(move || part.iter().map(compress).collect::<Vec<_>>()))
                .collect();
            parts
                .into_iter()
                .flat_map(|p| match p.join() {
                    Ok(v) => v,
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect()
        })
    }
}

impl DataQsl {
    /// Reads and stores `indices`, outside the lock (loading may take
    /// minutes), a chunk at a time, so that raw and compressed copies of
    /// the whole set are never held together.
    fn read_and_store(
        &self,
        indices: &[QuerySampleIndex],
    ) -> Result<Vec<(QuerySampleIndex, StoredSample)>, SutError> {
        let mut stored = Vec::with_capacity(indices.len());
        let mut chunk = Vec::new();
        let mut chunk_bytes = 0;
        for &i in indices {
            let data = self.source.read(i)?;
            self.progress.read(data.len());
            chunk_bytes += data.len();
            chunk.push((i, data));
            if chunk_bytes >= LOAD_CHUNK {
                stored.extend(self.store(std::mem::take(&mut chunk)));
                chunk_bytes = 0;
            }
        }
        stored.extend(self.store(chunk));
        Ok(stored)
    }
}

impl QuerySampleLibrary for DataQsl {
    fn name(&self) -> String {
        match self.input_codec.compresses() {
            true => format!("{}, sent as {}", self.source.describe(), self.input_codec),
            false => self.source.describe(),
        }
    }

    fn total_sample_count(&self) -> usize {
        self.source.total()
    }

    fn performance_sample_count(&self) -> usize {
        self.performance
    }

    fn load_samples(&self, indices: &[QuerySampleIndex]) -> Result<(), SutError> {
        self.progress.begin(indices.len());
        let stored = self.read_and_store(indices);
        self.progress.end();
        let mut loaded = self
            .loaded
            .write()
            .map_err(|_| SutError("the sample store is poisoned".into()))?;
        for (i, data) in stored? {
            let slot = loaded
                .get_mut(i)
                .ok_or_else(|| SutError(format!("sample {i} is not in the data set")))?;
            *slot = Some(data);
        }
        Ok(())
    }

    fn unload_samples(&self, indices: &[QuerySampleIndex]) -> Result<(), SutError> {
        let mut loaded = self
            .loaded
            .write()
            .map_err(|_| SutError("the sample store is poisoned".into()))?;
        for &i in indices {
            if let Some(slot) = loaded.get_mut(i) {
                *slot = None;
            }
        }
        Ok(())
    }
}

impl qdl::SampleData for DataQsl {
    fn sample(&self, index: QuerySampleIndex) -> Option<StoredSample> {
        self.loaded(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_samples_are_stable_and_distinct() {
        let a = synthetic_sample(3, 100);
        assert_eq!(a.len(), 100);
        assert_eq!(a, synthetic_sample(3, 100));
        assert_ne!(a, synthetic_sample(4, 100));
    }

    #[test]
    fn loads_and_unloads_npy_samples() {
        let dir = testkit::Scratch::new("qsl-npy");
        for i in 0..3u8 {
            let data = [i; 8];
            std::fs::write(
                dir.join(format!("s{i}.npy")),
                npy::encode("|u1", &[8], &data),
            )
            .unwrap();
        }
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
        let qsl = DataQsl::new(DataSource::npy_dir(&dir).unwrap(), 2);
        assert_eq!(
            (qsl.total_sample_count(), qsl.performance_sample_count()),
            (3, 2)
        );
        assert!(qsl.loaded(1).is_none());
        qsl.load_samples(&[2, 1]).unwrap();
        assert_eq!(
            qsl.loaded(2).unwrap(),
            StoredSample::raw(Bytes::from(vec![2u8; 8]))
        );
        qsl.unload_samples(&[2]).unwrap();
        assert!(qsl.loaded(2).is_none() && qsl.loaded(1).is_some());
        assert!(qsl
            .load_samples(&[7])
            .unwrap_err()
            .0
            .contains("not in the data set"));

        std::fs::write(dir.join("s9.npy"), b"garbage").unwrap();
        let qsl = DataQsl::new(DataSource::npy_dir(&dir).unwrap(), 4);
        let err = qsl.load_samples(&[3]).unwrap_err().0;
        assert!(err.contains("s9.npy") && err.contains("magic"), "{err}");
    }

    #[test]
    fn compresses_each_sample_once_at_load_time() {
        use compression::CodecKind;
        use qdl::SampleData;
        let source = DataSource::Synthetic {
            sample_bytes: 5000,
            total: 40,
            tensors: &[],
        };
        for spec in ["zstd", "zstd:19", "lz4"] {
            let spec: CodecSpec = spec.parse().unwrap();
            let qsl = DataQsl::new(source.clone(), 40).with_input_codec(spec);
            assert!(qsl.name().ends_with(&format!("sent as {spec}")));
            let all: Vec<usize> = (0..40).collect();
            qsl.load_samples(&all).unwrap();
            for i in all {
                let s = qsl.sample(i).unwrap();
                assert_eq!(s.codec, Codec::from(spec.kind));
                assert_eq!(s.raw_len, 5000);
                let back = compression::decompress(spec.kind, &s.payload, 5000).unwrap();
                assert_eq!(back, synthetic_sample(i, 5000), "{spec}: sample {i}");
                // The same bytes every time: stored, not recompressed.
                assert_eq!(qsl.sample(i).unwrap().payload.as_ptr(), s.payload.as_ptr());
            }
        }
        let plain = DataQsl::new(source, 40);
        plain.load_samples(&[7]).unwrap();
        let s = plain.sample(7).unwrap();
        assert_eq!((s.codec, s.raw_len), (Codec::None, 5000));
        assert_eq!(plain.input_codec().kind, CodecKind::None);
    }
}
