//! The Query Sample Library of the LoadGen node: it owns the data set and
//! loads the samples the LoadGen asks for into RAM, untimed, before a series
//! starts, compressing each one on its own with the input codec if there is
//! one. The QDL then sends each sample's stored bytes as they are.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use bytes::Bytes;
use compression::{CodecSpec, SampleCodec};
use loadgen_engine::sut::SutError;
use loadgen_engine::{QuerySampleIndex, QuerySampleLibrary};
use proto::Codec;
use qdl::StoredSample;

use crate::npy;

/// Where the samples come from.
#[derive(Clone, Debug)]
pub enum DataSource {
    /// One `.npy` file per sample; sample `i` is the `i`-th file in name order.
    NpyDir { dir: PathBuf, files: Vec<PathBuf> },
    /// Deterministic pseudo-random samples of a fixed size, made at load time.
    Synthetic { sample_bytes: usize, total: usize },
}

impl DataSource {
    /// The `.npy` files of `dir`, sorted by name.
    pub fn npy_dir(dir: &Path) -> Result<Self, SutError> {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| SutError(format!("cannot read the data set {}: {e}", dir.display())))?;
        let mut files = Vec::new();
        for entry in entries {
            let path = entry
                .map_err(|e| SutError(format!("cannot read the data set {}: {e}", dir.display())))?
                .path();
            if path.extension().is_some_and(|e| e == "npy") {
                files.push(path);
            }
        }
        if files.is_empty() {
            return Err(SutError(format!("{}: no .npy files", dir.display())));
        }
        files.sort();
        Ok(DataSource::NpyDir {
            dir: dir.to_path_buf(),
            files,
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
                let sample_bytes = match (sample_bytes, bench) {
                    (Some(b), _) => b,
                    (None, Some(b)) => b.input_bytes,
                    (None, None) => anyhow::bail!(
                        "--model {model}: not a benchmark this node knows ({}); give --dataset \
                         DIR or --sample-bytes N",
                        crate::benchmarks::names().join(", ")
                    ),
                };
                DataSource::Synthetic {
                    sample_bytes,
                    total: total.or(bench.map(|b| b.total_samples)).unwrap_or(1024),
                }
            }
        };
        if source.total() == 0 {
            anyhow::bail!("the data set has no samples");
        }
        if let (Some(n), DataSource::NpyDir { files, .. }) = (total, &source) {
            if n != files.len() {
                anyhow::bail!(
                    "--total-sample-count {n} but --dataset has {} .npy files",
                    files.len()
                );
            }
        }
        Ok(source)
    }

    pub fn total(&self) -> usize {
        match self {
            DataSource::NpyDir { files, .. } => files.len(),
            DataSource::Synthetic { total, .. } => *total,
        }
    }

    /// The bytes of sample `index`, as they will be sent.
    pub fn read(&self, index: QuerySampleIndex) -> Result<Vec<u8>, SutError> {
        match self {
            DataSource::NpyDir { files, .. } => {
                let path = files
                    .get(index)
                    .ok_or_else(|| SutError(format!("sample {index} is not in the data set")))?;
                npy::read(path)
                    .map(|a| a.data)
                    .map_err(|e| SutError(e.to_string()))
            }
            DataSource::Synthetic {
                sample_bytes,
                total,
            } => match index < *total {
                true => Ok(synthetic_sample(index, *sample_bytes)),
                false => Err(SutError(format!("sample {index} is not in the data set"))),
            },
        }
    }

    fn describe(&self) -> String {
        match self {
            DataSource::NpyDir { dir, files } => {
                format!("{} ({} .npy samples)", dir.display(), files.len())
            }
            DataSource::Synthetic {
                sample_bytes,
                total,
            } => format!("synthetic ({total} samples of {sample_bytes} bytes)"),
        }
    }
}

/// Sample `index` of the synthetic data set: a splitmix64 stream seeded by
/// the index, so every sample differs and any process can recreate it.
pub fn synthetic_sample(index: QuerySampleIndex, len: usize) -> Vec<u8> {
    let mut state = (index as u64) ^ 0x5851_f42d_4c95_7f2d;
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

/// A QSL over a [`DataSource`], holding the loaded samples in RAM.
pub struct DataQsl {
    source: DataSource,
    performance: usize,
    input_codec: CodecSpec,
    codec: Box<dyn SampleCodec>,
    /// Loaded samples by index; read on the timed path, written only by
    /// load/unload between series.
    loaded: RwLock<Vec<Option<StoredSample>>>,
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
        }
    }

    /// Stores every sample compressed with `spec` (each on its own, at load
    /// time). Whether the benchmark allows it is for the caller to check
    /// (`compression::policy`).
    pub fn with_input_codec(mut self, spec: CodecSpec) -> Self {
        self.input_codec = spec;
        self.codec = spec.codec();
        self
    }

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
        // Read and compress outside the lock: loading may take seconds.
        let mut read = Vec::with_capacity(indices.len());
        for &i in indices {
            read.push((i, self.source.read(i)?));
        }
        let read = self.store(read);
        let mut loaded = self
            .loaded
            .write()
            .map_err(|_| SutError("the sample store is poisoned".into()))?;
        for (i, data) in read {
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
        let dir = std::env::temp_dir().join(format!("qsl-npy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
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
