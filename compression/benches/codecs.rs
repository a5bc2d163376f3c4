//! The approved codecs on realistic payloads, one core each: compression
//! ratio, compression and decompression speed, and what that means for the
//! highest sample rate a 10 GbE and a 100 GbE link carry with and without
//! each codec, and how many cores decoding at that rate takes.
//!
//! ```sh
//! cargo bench -p compression --bench codecs
//! ```
//!
//! `BENCH_QUICK=1` measures each figure for a shorter time. The payloads are
//! generated (deterministically), never downloaded:
//!
//! - ResNet50 input, uint8 3x224x224: an image-like picture (smooth
//!   gradients and shapes, plus sensor-like noise of a few levels);
//! - ResNet50 input, fp32 3x224x224: the same picture preprocessed as the
//!   MLPerf reference does (uint8 minus the per-channel mean, as float32);
//! - LLM prompt: 1024 int32 token ids drawn from a Zipf(1.1) distribution
//!   over a 32,000-token vocabulary (ids shuffled, so frequent tokens are not
//!   all small numbers);
//! - 3D-UNet output: 128^3 uint8 segmentation labels, mostly background
//!   with a kidney-sized and a tumour-sized ellipsoid.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench: a failed step ends it, saying which
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use compression::CodecSpec;

/// 10 GbE and 100 GbE line rates, in bytes per second.
const LINKS: [(&str, f64); 2] = [("10GbE", 10e9 / 8.0), ("100GbE", 100e9 / 8.0)];

/// Deterministic xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Roughly normal (sum of four uniforms), mean 0, deviation `sd`.
    fn normal(&mut self, sd: f64) -> f64 {
        let s: f64 = (0..4).map(|_| self.unit()).sum();
        (s - 2.0) * sd * (3.0f64).sqrt()
    }
}

/// A 224x224 RGB picture, channel-major (CHW) as the model takes it.
fn image_u8(seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let (w, h) = (224usize, 224usize);
    let mut out = Vec::with_capacity(3 * w * h);
    // A sky-to-ground gradient, two soft shapes and some texture.
    let shapes = [(70.0, 80.0, 45.0), (150.0, 140.0, 60.0)];
    for c in 0..3 {
        let base = [110.0, 120.0, 135.0][c];
        for y in 0..h {
            for x in 0..w {
                let (xf, yf) = (x as f64, y as f64);
                let mut v = base + 60.0 * (yf / h as f64 - 0.5) + 15.0 * (xf / 19.0).sin();
                for (i, (cx, cy, r)) in shapes.iter().enumerate() {
                    let d = ((xf - cx).powi(2) + (yf - cy).powi(2)).sqrt();
                    if d < *r {
                        v += [50.0, -40.0][i] * (1.0 - d / r) * [1.0, 0.7, 0.4][c];
                    }
                }
                v += 8.0 * ((xf * 0.31).sin() * (yf * 0.23).cos());
                v += rng.normal(2.0);
                out.push(v.round().clamp(0.0, 255.0) as u8);
            }
        }
    }
    out
}

/// The MLPerf ResNet50 reference preprocessing of `img`: float32 of each
/// value minus its channel's mean.
fn image_f32(img: &[u8]) -> Vec<u8> {
    let means = [123.68f32, 116.78, 103.94];
    let plane = img.len() / 3;
    img.iter()
        .enumerate()
        .flat_map(|(i, &v)| (v as f32 - means[i / plane]).to_le_bytes())
        .collect()
}

/// `n` int32 token ids, Zipf(1.1) over a 32,000-token vocabulary.
fn tokens(n: usize, seed: u64) -> Vec<u8> {
    const VOCAB: usize = 32_000;
    let mut rng = Rng(seed | 1);
    let mut cdf = Vec::with_capacity(VOCAB);
    let mut total = 0.0;
    for rank in 1..=VOCAB {
        total += 1.0 / (rank as f64).powf(1.1);
        cdf.push(total);
    }
    // Rank -> id: a fixed shuffle.
    let mut ids: Vec<u32> = (0..VOCAB as u32).collect();
    for i in (1..VOCAB).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        ids.swap(i, j);
    }
    (0..n)
        .flat_map(|_| {
            let u = rng.unit() * total;
            let rank = cdf.partition_point(|&c| c < u).min(VOCAB - 1);
            ids[rank].to_le_bytes()
        })
        .collect()
}

/// 128^3 labels: 0 background, 1 kidney, 2 tumour.
fn segmentation() -> Vec<u8> {
    let n = 128usize;
    let mut out = vec![0u8; n * n * n];
    let blobs = [
        ((64.0, 60.0, 58.0), (30.0, 22.0, 18.0), 1u8),
        ((70.0, 66.0, 62.0), (9.0, 8.0, 7.0), 2u8),
    ];
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                for ((cx, cy, cz), (rx, ry, rz), label) in blobs {
                    let d = ((x as f64 - cx) / rx).powi(2)
                        + ((y as f64 - cy) / ry).powi(2)
                        + ((z as f64 - cz) / rz).powi(2);
                    if d <= 1.0 {
                        out[(z * n + y) * n + x] = label;
                    }
                }
            }
        }
    }
    out
}

/// Rounds per figure and pass; the fastest round is kept, so that a round
/// slowed by another process on a shared machine does not count.
const ROUNDS: u32 = 5;
/// Passes over every (payload, codec) pair; each figure is the best of its
/// passes, so a disturbance lasting seconds spoils no figure of every pass.
const PASSES: u32 = 3;

/// Seconds per call of `f`: the best of [`ROUNDS`] rounds, each calling it
/// until `min / ROUNDS` has passed (at least once).
fn time(min: Duration, mut f: impl FnMut()) -> f64 {
    f(); // warm up: contexts, caches
    let round = min / ROUNDS;
    let mut best = f64::INFINITY;
    for _ in 0..ROUNDS {
        let mut n = 0u32;
        let t0 = Instant::now();
        while n == 0 || t0.elapsed() < round {
            f();
            n += 1;
        }
        best = best.min(t0.elapsed().as_secs_f64() / f64::from(n));
    }
    best
}

struct Row {
    payload: &'static str,
    raw: usize,
    codec: String,
    wire: usize,
    compress_mbs: f64,
    decompress_mbs: f64,
}

fn measure(payload: &'static str, data: &[u8], spec: CodecSpec, min: Duration) -> Row {
    let codec = spec.codec();
    let frame = codec.compress(data);
    let back = codec
        .decompress(&frame, data.len())
        .expect("the codec round-trips");
    assert_eq!(back, data, "{payload} {spec}: lossless");
    let mb = data.len() as f64 / 1e6;
    let c = time(min, || {
        black_box(codec.compress(black_box(data)));
    });
    let d = time(min, || {
        black_box(codec.decompress(black_box(&frame), data.len()).ok());
    });
    Row {
        payload,
        raw: data.len(),
        codec: spec.to_string(),
        wire: frame.len(),
        compress_mbs: mb / c,
        decompress_mbs: mb / d,
    }
}

fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let (passes, min) = match quick {
        true => (1, Duration::from_millis(60)),
        false => (PASSES, Duration::from_millis(150)),
    };
    let img = image_u8(7);
    let payloads: Vec<(&'static str, Vec<u8>)> = vec![
        ("resnet50 u8 3x224x224", img.clone()),
        ("resnet50 fp32 3x224x224", image_f32(&img)),
        ("llm prompt 1024 int32 ids", tokens(1024, 11)),
        ("3d-unet labels 128^3 u8", segmentation()),
    ];
    let specs: Vec<CodecSpec> = ["none", "lz4", "zstd:1", "zstd:3", "zstd:9", "zstd:19"]
        .iter()
        .map(|s| s.parse().expect("a codec spec"))
        .collect();

    let mut rows: Vec<Row> = Vec::new();
    for pass in 1..=passes {
        let mut i = 0;
        for (name, data) in &payloads {
            for spec in &specs {
                eprintln!("pass {pass}/{passes}: {name} with {spec}");
                let r = measure(name, data, *spec, min);
                match rows.get_mut(i) {
                    Some(best) => {
                        best.compress_mbs = best.compress_mbs.max(r.compress_mbs);
                        best.decompress_mbs = best.decompress_mbs.max(r.decompress_mbs);
                    }
                    None => rows.push(r),
                }
                i += 1;
            }
        }
    }

    println!(
        "One core per figure (best of {passes} passes of {ROUNDS} rounds); MB/s are of \
         uncompressed data. \
         Link rates: line rate, payload bytes only (no TCP/IP, HTTP/2 or gRPC framing). \
         \"link\": the samples/s the link carries; \"1 core\": what one decoding core \
         allows of that (the lower of the two).\n"
    );
    println!(
        "| payload | codec | bytes on the wire | ratio | compress MB/s | decompress MB/s \
         | 10GbE: link / 1 core | 100GbE: link / 1 core | cores to keep up at 10GbE / 100GbE |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let ratio = r.raw as f64 / r.wire as f64;
        let link = |bps: f64| bps / r.wire as f64;
        let decode_rate = r.decompress_mbs * 1e6 / r.raw as f64;
        let raw = r.codec == "none";
        let rates = |bps: f64| {
            if raw {
                format!("{} / -", si(link(bps)))
            } else {
                format!("{} / {}", si(link(bps)), si(link(bps).min(decode_rate)))
            }
        };
        let dash = || "-".to_string();
        println!(
            "| {} | {} | {} of {} | {:.2} | {} | {} | {} | {} | {} |",
            r.payload,
            r.codec,
            r.wire,
            r.raw,
            ratio,
            if raw {
                dash()
            } else {
                format!("{:.0}", r.compress_mbs)
            },
            if raw {
                dash()
            } else {
                format!("{:.0}", r.decompress_mbs)
            },
            rates(LINKS[0].1),
            rates(LINKS[1].1),
            if raw {
                dash()
            } else {
                format!(
                    "{:.1} / {:.1}",
                    link(LINKS[0].1) / decode_rate,
                    link(LINKS[1].1) / decode_rate
                )
            },
        );
    }
}
