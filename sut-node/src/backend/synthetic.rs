//! The `synthetic` backend: stands in for an accelerator. Each batch takes a
//! configurable service time (the worker thread sleeps), and each answer is
//! `facts::synthetic::answer(input, output_size)`, a deterministic function
//! of the input that the LoadGen side's accuracy check recomputes.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use thiserror::Error;

use super::{Answer, Backend, BackendError, BatchInfo, Output, SampleSink, SessionNeeds};

/// How long the emulated accelerator takes for one batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServiceTime {
    /// The same time for every batch, whatever its size.
    Fixed(Duration),
    /// Exponentially distributed with this mean (a seeded random stream).
    Exponential(Duration),
    /// `fixed` per batch plus `per_sample` for each sample in it.
    Batch {
        /// The part every batch takes, whatever its size.
        fixed: Duration,
        /// The part each sample of the batch adds.
        per_sample: Duration,
    },
}

/// A `--service-time` value that is not `fixed:US`, `exp:MEAN_US` or
/// `batch:FIXED_US+PER_SAMPLE_US`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid service time {input:?}: {reason} (expected fixed:US, exp:MEAN_US or batch:FIXED_US+PER_SAMPLE_US, in microseconds)")]
pub struct ParseServiceTimeError {
    input: String,
    reason: String,
}

impl FromStr for ServiceTime {
    type Err = ParseServiceTimeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |reason: &str| ParseServiceTimeError {
            input: s.to_string(),
            reason: reason.to_string(),
        };
        let micros = |v: &str| {
            v.trim()
                .parse::<u64>()
                .map(Duration::from_micros)
                .map_err(|_| fail(&format!("{v:?} is not a whole number of microseconds")))
        };
        let (kind, value) = s.split_once(':').ok_or_else(|| fail("missing ':'"))?;
        match kind.trim() {
            "fixed" => Ok(Self::Fixed(micros(value)?)),
            "exp" => Ok(Self::Exponential(micros(value)?)),
            "batch" => {
                let (fixed, per_sample) = value
                    .split_once('+')
                    .ok_or_else(|| fail("batch needs FIXED_US+PER_SAMPLE_US"))?;
                Ok(Self::Batch {
                    fixed: micros(fixed)?,
                    per_sample: micros(per_sample)?,
                })
            }
            other => Err(fail(&format!("unknown kind {other:?}"))),
        }
    }
}

impl fmt::Display for ServiceTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(d) => write!(f, "fixed:{}", d.as_micros()),
            Self::Exponential(mean) => write!(f, "exp:{}", mean.as_micros()),
            Self::Batch { fixed, per_sample } => {
                write!(f, "batch:{}+{}", fixed.as_micros(), per_sample.as_micros())
            }
        }
    }
}

impl ServiceTime {
    /// The time of one batch of `batch_len` samples; `uniform` draws from
    /// [0, 1) and is called only for exponential service times.
    pub fn for_batch(&self, batch_len: usize, uniform: impl FnOnce() -> f64) -> Duration {
        match *self {
            Self::Fixed(d) => d,
            // Inverse transform sampling; 1 - u is in (0, 1], so ln is finite.
            Self::Exponential(mean) => mean.mul_f64(-(1.0 - uniform()).ln()),
            Self::Batch { fixed, per_sample } => {
                let n = u32::try_from(batch_len).unwrap_or(u32::MAX);
                fixed.saturating_add(per_sample.saturating_mul(n))
            }
        }
    }

    fn is_zero(&self) -> bool {
        match *self {
            Self::Fixed(d) | Self::Exponential(d) => d.is_zero(),
            Self::Batch { fixed, per_sample } => fixed.is_zero() && per_sample.is_zero(),
        }
    }
}

/// How the synthetic answers are laid out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AnswerLayout {
    /// `facts::synthetic::answer(input, output_size)`.
    #[default]
    Bytes,
    /// DLRMv3's float32 layout of the sample's session mode
    /// (`facts::synthetic::dlrm_v3_answer`), a candidate per 4 bytes of
    /// `output_size`.
    DlrmV3,
}

/// What the synthetic backend answers and how long it takes.
#[derive(Debug, Clone)]
pub struct SyntheticConfig {
    /// Bytes, or a benchmark's layout (`--benchmark dlrm-v3`).
    pub layout: AnswerLayout,
    /// How long each batch takes.
    pub service_time: ServiceTime,
    /// Bytes in each answer.
    pub output_size: usize,
    /// 0: not an LLM. Otherwise each sample gets a first token, then an
    /// answer reporting this many tokens.
    pub llm_tokens: u32,
    /// Seed of the exponential service times.
    pub seed: u64,
}

impl SyntheticConfig {
    /// Answers sized as `benchmark`'s (the suite table's answer size and,
    /// for an LLM, a token per 4 answer bytes) where `output_size` and
    /// `llm_tokens` are not given; 4 bytes and no tokens without one.
    pub fn answering(
        benchmark: Option<&facts::benchmarks::Benchmark>,
        output_size: Option<usize>,
        llm_tokens: Option<u32>,
        service_time: ServiceTime,
        seed: u64,
    ) -> Self {
        let output_size = output_size
            .or(benchmark.map(|b| b.output_bytes))
            .unwrap_or(4);
        let llm_tokens = llm_tokens.unwrap_or(match benchmark {
            Some(b) if b.llm => u32::try_from(output_size / 4).unwrap_or(u32::MAX),
            _ => 0,
        });
        let dlrm_v3 = benchmark.is_some_and(|b| b.model == "dlrm-v3");
        SyntheticConfig {
            layout: if dlrm_v3 {
                AnswerLayout::DlrmV3
            } else {
                AnswerLayout::Bytes
            },
            service_time,
            output_size,
            llm_tokens,
            seed,
        }
    }
}

/// The most of a previous batch's sleep overshoot that a back-to-back batch
/// makes up (see `Synthetic::schedule`).
const MAX_CATCH_UP: Duration = Duration::from_millis(1);

/// The previous batch: when it was due to end, and when its sleep ended.
#[derive(Debug, Clone, Copy)]
struct LastBatch {
    end: Instant,
    woke: Instant,
}

/// A backend that runs no model: it sleeps for each batch's service time
/// and answers each sample with `facts::synthetic::answer` of its input
/// (and, for an LLM, a first token and a token count).
pub struct Synthetic {
    config: SyntheticConfig,
    /// splitmix64 state: advancing it is one atomic add.
    rng: AtomicU64,
    last: Mutex<Option<LastBatch>>,
}

impl Synthetic {
    /// A synthetic backend with `config`'s answers and service times.
    pub fn new(config: SyntheticConfig) -> Self {
        let rng = AtomicU64::new(config.seed);
        Self {
            config,
            rng,
            last: Mutex::new(None),
        }
    }

    /// A uniform draw in [0, 1) from the seeded splitmix64 stream.
    fn uniform(&self) -> f64 {
        const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut z = self
            .rng
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// When a batch taking `service` starts and ends on the emulated
    /// accelerator. A back-to-back batch starts when the previous one was due
    /// to end, as on a busy accelerator: the OS's sleep overshoot (tens of
    /// µs) then does not add up over a busy stretch, and the throughput is
    /// right. Only that overshoot is made up (at most `MAX_CATCH_UP`), never
    /// a backlog. Any other batch starts now, so latencies are never
    /// shortened.
    fn schedule(&self, service: Duration, back_to_back: bool) -> (Instant, Instant) {
        let last = *self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let start = match last {
            Some(LastBatch { end, woke }) if back_to_back => {
                end.max(woke.checked_sub(MAX_CATCH_UP).unwrap_or(end))
            }
            _ => Instant::now(),
        };
        (start, start + service)
    }

    fn finished(&self, end: Instant) {
        let woke = Instant::now();
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(LastBatch { end, woke });
    }
}

fn sleep_until(deadline: Instant) {
    let left = deadline.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        std::thread::sleep(left);
    }
}

impl Backend for Synthetic {
    fn name(&self) -> &str {
        "synthetic"
    }

    /// It answers as it was started: as an LLM only with `--llm-tokens`
    /// (or an LLM `--benchmark`), never as the session asks.
    fn cannot_serve(&self, needs: &SessionNeeds<'_>) -> Option<String> {
        let tokens = self.config.llm_tokens;
        match (needs.token_latencies, tokens) {
            (false, _) | (true, 2..) => None,
            (true, 0) => Some(format!(
                "a {} session is judged on token latencies, and this node's synthetic backend \
                 answers without tokens: start it with --benchmark {} (or --llm-tokens N, N of \
                 2 or more)",
                needs.model, needs.model
            )),
            (true, _) => Some(format!(
                "a {} session is judged on token latencies, and this node's synthetic backend \
                 answers with {tokens} token, where the LoadGen needs more than one: start it \
                 with --llm-tokens 2 or more",
                needs.model
            )),
        }
    }

    fn warm_up(&self) -> Result<(), BackendError> {
        // Nothing to load.
        Ok(())
    }

    fn infer(
        &self,
        inputs: &[Bytes],
        info: BatchInfo,
        first_tokens: &mut dyn SampleSink,
    ) -> Result<Vec<Output>, BackendError> {
        let size = self.config.output_size;
        let answers: Vec<Bytes> = inputs
            .iter()
            .enumerate()
            .map(|(i, input)| {
                Bytes::from(match self.config.layout {
                    AnswerLayout::Bytes => facts::synthetic::answer(input, size),
                    AnswerLayout::DlrmV3 => facts::synthetic::dlrm_v3_answer(
                        input,
                        facts::synthetic::dlrm_v3_candidates(size),
                        info.accuracy(i),
                    ),
                })
            })
            .collect();
        let service_time = self.config.service_time;
        let timing = (!service_time.is_zero()).then(|| {
            let service = service_time.for_batch(inputs.len(), || self.uniform());
            self.schedule(service, info.back_to_back)
        });

        let llm_tokens = self.config.llm_tokens;
        if llm_tokens > 0 {
            // Every token takes the same share of the batch's time: the first
            // tokens come after 1/N of it, the answers at the end.
            if let Some((start, end)) = timing {
                sleep_until(start + (end - start) / llm_tokens);
            }
            for (i, answer) in answers.iter().enumerate() {
                first_tokens.first_token(i, answer.slice(..answer.len().min(4)));
            }
        }
        if let Some((_, end)) = timing {
            sleep_until(end);
            self.finished(end);
        }
        let n_tokens = i64::from(llm_tokens);
        Ok(answers
            .into_iter()
            .map(|payload| Ok(Answer { payload, n_tokens }))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RunMode;

    const US: fn(u64) -> Duration = Duration::from_micros;

    #[test]
    fn parses_the_three_forms_and_prints_them_back() {
        for (text, parsed) in [
            ("fixed:0", ServiceTime::Fixed(US(0))),
            ("fixed:250", ServiceTime::Fixed(US(250))),
            ("exp:1000", ServiceTime::Exponential(US(1000))),
            (
                "batch:100+20",
                ServiceTime::Batch {
                    fixed: US(100),
                    per_sample: US(20),
                },
            ),
        ] {
            assert_eq!(text.parse::<ServiceTime>(), Ok(parsed), "{text}");
            assert_eq!(parsed.to_string(), text);
        }
    }

    #[test]
    fn refuses_malformed_service_times() {
        for text in [
            "",
            "fixed",
            "fixed:",
            "fixed:-1",
            "fixed:1.5",
            "exp:x",
            "batch:10",
            "batch:10+",
            "batch:+5",
            "batch:1+x",
            "gauss:10",
            "10",
        ] {
            let err = text.parse::<ServiceTime>().unwrap_err();
            assert!(
                err.to_string().contains("expected fixed:US"),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn batch_time_grows_with_the_batch_and_fixed_does_not() {
        let batch: ServiceTime = "batch:100+20".parse().unwrap();
        let never = || panic!("only exponential times draw random numbers");
        assert_eq!(batch.for_batch(1, never), US(120));
        assert_eq!(batch.for_batch(8, never), US(260));
        let fixed = ServiceTime::Fixed(US(70));
        assert_eq!(fixed.for_batch(1, never), fixed.for_batch(64, never));
    }

    #[test]
    fn exponential_times_are_seeded_and_have_the_asked_mean() {
        let config = |seed| SyntheticConfig {
            layout: Default::default(),
            service_time: ServiceTime::Exponential(US(1000)),
            output_size: 4,
            llm_tokens: 0,
            seed,
        };
        let draws = |backend: &Synthetic, n: usize| -> Vec<Duration> {
            let st = backend.config.service_time;
            (0..n)
                .map(|_| st.for_batch(1, || backend.uniform()))
                .collect()
        };
        let (a, b) = (Synthetic::new(config(7)), Synthetic::new(config(7)));
        assert_eq!(draws(&a, 100), draws(&b, 100));
        assert_ne!(draws(&Synthetic::new(config(8)), 100), draws(&b, 100));

        let n = 200_000;
        let times = draws(&Synthetic::new(config(1)), n);
        let mean = times.iter().sum::<Duration>().as_secs_f64() / n as f64;
        assert!((mean - 1e-3).abs() < 0.02e-3, "mean {mean}");
        // Exponential: about e^-1 of the draws exceed the mean.
        let above = times.iter().filter(|t| **t > US(1000)).count() as f64 / n as f64;
        assert!((above - (-1f64).exp()).abs() < 0.01, "{above}");
    }

    #[test]
    fn back_to_back_batches_make_up_the_sleep_overshoot_only() {
        let backend = Synthetic::new(SyntheticConfig {
            layout: Default::default(),
            service_time: ServiceTime::Fixed(US(1000)),
            output_size: 4,
            llm_tokens: 0,
            seed: 0,
        });
        let end = Instant::now();
        let set_last = |woke| *backend.last.lock().unwrap() = Some(LastBatch { end, woke });

        set_last(end + US(80));
        assert_eq!(backend.schedule(US(1000), true), (end, end + US(1000)));
        // After an idle gap, or for the first batch, a batch starts now.
        let before = Instant::now();
        let (start, stop) = backend.schedule(US(1000), false);
        assert!(start >= before && stop == start + US(1000));
        // A long overshoot (say, a batch slower than its service time) is not
        // made up beyond MAX_CATCH_UP.
        set_last(end + US(5000));
        assert_eq!(backend.schedule(US(1000), true).0, end + US(4000));
    }

    struct Collect(Vec<(usize, Bytes)>);
    impl SampleSink for Collect {
        fn first_token(&mut self, index: usize, payload: Bytes) {
            self.0.push((index, payload));
        }
    }

    #[test]
    fn answers_are_the_shared_synthetic_function_of_the_input() {
        let backend = Synthetic::new(SyntheticConfig {
            layout: Default::default(),
            service_time: ServiceTime::Fixed(US(0)),
            output_size: 12,
            llm_tokens: 0,
            seed: 0,
        });
        let inputs = [Bytes::from_static(b"one"), Bytes::from_static(b"two")];
        let mut sink = Collect(Vec::new());
        let outputs = backend
            .infer(&inputs, BatchInfo::default(), &mut sink)
            .unwrap();
        assert!(sink.0.is_empty(), "no first tokens outside LLM mode");
        assert_eq!(outputs.len(), 2);
        for (input, output) in inputs.iter().zip(outputs) {
            let answer = output.unwrap();
            assert_eq!(answer.payload, facts::synthetic::answer(input, 12));
            assert_eq!(answer.n_tokens, 0);
        }
    }

    #[test]
    fn dlrm_v3_answers_follow_each_samples_session_mode() {
        let backend = Synthetic::new(SyntheticConfig {
            layout: AnswerLayout::DlrmV3,
            service_time: ServiceTime::Fixed(US(0)),
            output_size: 16,
            llm_tokens: 0,
            seed: 0,
        });
        let inputs = [Bytes::from_static(b"one"), Bytes::from_static(b"two")];
        let modes = [RunMode::AccuracyOnly, RunMode::PerformanceOnly];
        let info = BatchInfo {
            back_to_back: false,
            modes: &modes,
        };
        let outputs = backend
            .infer(&inputs, info, &mut Collect(Vec::new()))
            .unwrap();
        let payload = |i: usize| outputs[i].as_ref().unwrap().payload.clone();
        assert_eq!(
            payload(0),
            facts::synthetic::dlrm_v3_answer(b"one", 4, true)
        );
        assert_eq!(
            payload(1),
            facts::synthetic::dlrm_v3_answer(b"two", 4, false)
        );
        // No mode said (an old LoadGen node): the performance layout.
        let outputs = backend
            .infer(&inputs[..1], BatchInfo::default(), &mut Collect(Vec::new()))
            .unwrap();
        assert_eq!(
            outputs[0].as_ref().unwrap().payload,
            facts::synthetic::dlrm_v3_answer(b"one", 4, false)
        );
    }

    #[test]
    fn llm_mode_sends_the_answers_first_bytes_as_first_token() {
        let backend = Synthetic::new(SyntheticConfig {
            layout: Default::default(),
            service_time: ServiceTime::Fixed(US(2000)),
            output_size: 10,
            llm_tokens: 32,
            seed: 0,
        });
        let inputs = [Bytes::from_static(b"a"), Bytes::from_static(b"b")];
        let mut sink = Collect(Vec::new());
        let started = Instant::now();
        let outputs = backend
            .infer(&inputs, BatchInfo::default(), &mut sink)
            .unwrap();
        assert!(
            started.elapsed() >= US(2000),
            "the batch takes its service time"
        );
        assert_eq!(sink.0.len(), 2);
        for (i, (input, output)) in inputs.iter().zip(outputs).enumerate() {
            let answer = output.unwrap();
            assert_eq!(answer.payload, facts::synthetic::answer(input, 10));
            assert_eq!(answer.n_tokens, 32);
            assert_eq!(sink.0[i], (i, answer.payload.slice(..4)));
        }
    }
}
