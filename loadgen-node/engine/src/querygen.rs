//! Query generation (`loadgen.cc`, `GenerateQueries`), incremental: queries are produced one at
//! a time in exactly the order and with exactly the random draws the official LoadGen
//! pre-generates, so memory stays bounded whatever the duration.

use crate::loadable::LoadableSet;
use crate::rng::{seconds_to_ns, Mt19937};
use crate::settings::{EffectiveSettings, Scenario};
use crate::sut::QuerySampleIndex;

/// Which kind of series the queries are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    /// A timed series, sized by the duration and query-count settings.
    Performance,
    /// One pass over the loaded samples.
    Accuracy,
}

/// What a full generation pass produces (logged before issuing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenerationPlan {
    /// Queries generated.
    pub query_count: u64,
    /// Samples over all those queries.
    pub sample_count: u64,
    /// The local samples per query (`generated_samples_per_query`).
    pub samples_per_query: u64,
    /// `generated_query_duration` in ns (includes the step after the last query).
    pub duration_ns: i64,
}

/// Local parameters of one generation (the locals `GenerateQueries` sets up), before any draw.
#[derive(Clone, Copy, Debug)]
struct Params {
    /// Samples per query after the Offline accuracy and equal-issue changes.
    spq: usize,
    /// `min_queries` as the equal-issue list sees it (before padding).
    list_min_queries: u64,
    /// `min_queries` after the equal-issue padding.
    min_queries: u64,
    gen_duration_ns: i64,
    /// Equal issue raises `min_queries` while the duration is not reached
    /// (all scenarios but Offline).
    bump: bool,
    loaded_len: usize,
}

impl Params {
    /// For a loaded list of `loaded_len` samples, the first
    /// `distribution_end` of them before the MultiStream padding.
    fn new(
        eff: &EffectiveSettings,
        loaded_len: usize,
        distribution_end: usize,
        kind: RunKind,
    ) -> Params {
        let multiplier: i64 = if eff.scenario == Scenario::Server {
            1
        } else {
            2
        };
        let mut gen_duration_ns = multiplier
            .saturating_mul(i64::try_from(eff.target_duration_ms).unwrap_or(i64::MAX))
            .saturating_mul(1_000_000);
        let mut min_queries = eff.min_query_count;
        let mut spq = usize::try_from(eff.samples_per_query).unwrap_or(usize::MAX);
        if kind == RunKind::Accuracy && eff.scenario == Scenario::Offline {
            spq = distribution_end;
        }
        if kind == RunKind::Accuracy || eff.performance_issue_unique {
            // Accuracy runs and unique runs never end early: one pass over
            // the loaded list (MultiStream padding makes the division round up).
            gen_duration_ns = 0;
            min_queries = loaded_len.checked_div(spq).unwrap_or(0) as u64;
        }
        let list_min_queries = min_queries;

        let equal_issue = eff.sample_concatenate_permutation;
        if kind != RunKind::Accuracy && equal_issue && loaded_len > 0 {
            if eff.scenario == Scenario::Offline {
                let rem = spq % loaded_len;
                if rem != 0 {
                    spq += loaded_len - rem;
                }
            } else {
                let len = loaded_len as u64;
                let rem = min_queries % len;
                if rem != 0 {
                    min_queries += len - rem;
                }
            }
        }
        if loaded_len == 0 {
            // Nothing to draw from: no queries at all.
            min_queries = 0;
            gen_duration_ns = 0;
        }
        Params {
            spq,
            list_min_queries,
            min_queries,
            gen_duration_ns,
            bump: equal_issue && eff.scenario != Scenario::Offline,
            loaded_len,
        }
    }
}

/// Inter-arrival steps (`loadgen.cc`, `ScheduleDistribution`): exponential draws for Server, a constant
/// period otherwise.
#[derive(Clone, Debug)]
enum Schedule {
    Constant(i64),
    Poisson { rng: Box<Mt19937>, qps: f64 },
}

impl Schedule {
    fn new(eff: &EffectiveSettings) -> Schedule {
        if eff.scenario == Scenario::Server {
            Schedule::Poisson {
                rng: Box::new(Mt19937::new(eff.schedule_rng_seed)),
                qps: eff.target_qps,
            }
        } else {
            Schedule::Constant(seconds_to_ns(1.0 / eff.target_qps))
        }
    }

    #[inline]
    fn next_delta(&mut self) -> i64 {
        match self {
            Schedule::Constant(d) => *d,
            Schedule::Poisson { rng, qps } => seconds_to_ns(rng.exponential(*qps)),
        }
    }
}

/// The generation loop's bookkeeping (`GenerateQueries`' loop), shared by the generator
/// and `plan` so both stop at exactly the same query.
#[derive(Clone, Debug)]
struct Timeline {
    schedule: Schedule,
    ts: i64,
    prev: i64,
    generated: u64,
    min_queries: u64,
    gen_duration_ns: i64,
    bump: bool,
    bump_step: u64,
}

impl Timeline {
    fn new(eff: &EffectiveSettings, p: &Params) -> Timeline {
        let schedule = Schedule::new(eff);
        let mut gen_duration_ns = p.gen_duration_ns;
        if let Schedule::Constant(d) = schedule {
            if d <= 0 {
                // A non-positive period never reaches the duration (the official LoadGen
                // loops forever); fall back to the query count alone.
                gen_duration_ns = 0;
            }
        }
        Timeline {
            schedule,
            ts: 0,
            prev: 0,
            generated: 0,
            min_queries: p.min_queries,
            gen_duration_ns,
            bump: p.bump,
            bump_step: p.loaded_len as u64,
        }
    }

    #[inline]
    fn has_next(&self) -> bool {
        self.prev < self.gen_duration_ns || self.generated < self.min_queries
    }

    /// Records one generated query and returns its scheduled offset. The
    /// step after it is drawn now, as the official LoadGen does for the last one too.
    #[inline]
    fn advance(&mut self) -> i64 {
        let scheduled = self.ts;
        self.generated += 1;
        self.prev = self.ts;
        self.ts = self.ts.saturating_add(self.schedule.next_delta());
        if self.bump && self.generated >= self.min_queries && self.prev < self.gen_duration_ns {
            self.min_queries += self.bump_step;
        }
        scheduled
    }
}

/// How a query's samples are chosen (`loadgen.cc`, `SampleDistribution`, `SampleDistributionEqualIssue`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pick {
    /// Next entry of a pre-shuffled position list (unique, accuracy or
    /// equal-issue order).
    Ordered,
    /// Always `performance_issue_same_index`.
    Same,
    /// `uniform_int(0, E - 1)` on sample_rng.
    Random,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// SingleStream / Server: each sample chosen on its own.
    Single,
    /// MultiStream: one start, `spq` contiguous loaded entries.
    Contiguous,
    /// Offline: copies of the loaded list.
    Offline,
}

/// Produces a series' queries one at a time, with the official LoadGen's
/// draws: each query's samples and its scheduled time.
pub struct QueryGenerator {
    loaded: Vec<QuerySampleIndex>,
    dist_end: usize,
    spq: usize,
    shape: Shape,
    pick: Pick,
    same: usize,
    /// Positions for `Pick::Ordered`, consumed in order (wrapping).
    order: Vec<usize>,
    cursor: usize,
    /// Offline with equal issue shuffles every full pass.
    shuffle_passes: bool,
    sample_rng: Mt19937,
    timeline: Timeline,
}

impl QueryGenerator {
    /// The generator of one series over the loaded set `set`.
    pub fn new(eff: &EffectiveSettings, set: &LoadableSet, kind: RunKind) -> Self {
        let p = Params::new(eff, set.samples.len(), set.distribution_end, kind);
        let loaded = set.samples.clone();
        let dist_end = set.distribution_end.min(loaded.len());
        let equal_issue = eff.sample_concatenate_permutation;

        let shape = match eff.scenario {
            Scenario::SingleStream | Scenario::Server => Shape::Single,
            Scenario::MultiStream => Shape::Contiguous,
            Scenario::Offline => Shape::Offline,
        };
        #[derive(PartialEq)]
        enum Source {
            Accuracy,
            Unique,
            EqualIssue,
            None,
        }
        let (pick, source) = if shape == Shape::Offline {
            // Offline repeats the loaded list; only "same" changes that.
            let pick = if eff.performance_issue_same {
                Pick::Same
            } else {
                Pick::Ordered
            };
            (pick, Source::None)
        } else if eff.performance_issue_unique {
            (Pick::Ordered, Source::Unique)
        } else if eff.performance_issue_same {
            (Pick::Same, Source::None)
        } else if equal_issue && shape == Shape::Single {
            (Pick::Ordered, Source::EqualIssue)
        } else if kind == RunKind::Accuracy {
            (Pick::Ordered, Source::Accuracy)
        } else {
            (Pick::Random, Source::None)
        };

        let mut sample_rng = Mt19937::new(eff.sample_index_rng_seed);
        let stride = if shape == Shape::Contiguous {
            p.spq.max(1)
        } else {
            1
        };
        let strided_count = dist_end.div_ceil(stride);
        let strided = |rng: &mut Mt19937, keep: bool| -> Vec<usize> {
            if keep {
                let mut v: Vec<usize> = (0..dist_end).step_by(stride).collect();
                rng.shuffle(&mut v);
                v
            } else {
                // Only the draws matter; their count does not depend on the
                // contents.
                rng.skip_shuffle(strided_count);
                Vec::new()
            }
        };

        // The order in which `GenerateQueries` consumes the draws: accuracy order (accuracy runs only),
        // unique order, equal-issue rounds.
        let mut order = Vec::new();
        if kind == RunKind::Accuracy {
            let v = strided(&mut sample_rng, source == Source::Accuracy);
            if source == Source::Accuracy {
                order = v;
            }
        }
        let v = strided(&mut sample_rng, source == Source::Unique);
        if source == Source::Unique {
            order = v;
        }
        let rounds = if p.loaded_len == 0 {
            0
        } else {
            p.list_min_queries.div_ceil(p.loaded_len as u64)
        };
        if source == Source::EqualIssue {
            let mut perm: Vec<usize> = (0..p.loaded_len).collect();
            // Rounds are cumulative: each shuffles the previous result.
            for _ in 0..rounds {
                sample_rng.shuffle(&mut perm);
                order.extend_from_slice(&perm);
            }
            if order.is_empty() {
                // No round was drawn (min_queries 0 with a duration bound);
                // nothing else uses sample_rng on this path, so draw one here.
                sample_rng.shuffle(&mut perm);
                order = perm;
            }
        } else {
            for _ in 0..rounds {
                sample_rng.skip_shuffle(p.loaded_len);
            }
        }

        let timeline = Timeline::new(eff, &p);
        QueryGenerator {
            same: usize::try_from(eff.performance_issue_same_index).unwrap_or(usize::MAX),
            loaded,
            dist_end,
            spq: p.spq,
            shape,
            pick,
            order,
            cursor: 0,
            shuffle_passes: equal_issue,
            sample_rng,
            timeline,
        }
    }

    /// Runs a whole generation without keeping anything.
    ///
    /// Sample choice never influences how many queries are generated or
    /// their offsets, so only the schedule is replayed.
    pub fn plan(eff: &EffectiveSettings, set: &LoadableSet, kind: RunKind) -> GenerationPlan {
        Self::plan_for(eff, set.samples.len(), set.distribution_end, kind)
    }

    /// [`Self::plan`] for a loaded list of `loaded_len` samples, the first
    /// `distribution_end` before the MultiStream padding: its indices do
    /// not matter.
    pub(crate) fn plan_for(
        eff: &EffectiveSettings,
        loaded_len: usize,
        distribution_end: usize,
        kind: RunKind,
    ) -> GenerationPlan {
        let p = Params::new(eff, loaded_len, distribution_end, kind);
        let mut timeline = Timeline::new(eff, &p);
        while timeline.has_next() {
            timeline.advance();
        }
        GenerationPlan {
            query_count: timeline.generated,
            sample_count: timeline.generated.saturating_mul(p.spq as u64),
            samples_per_query: p.spq as u64,
            duration_ns: timeline.ts,
        }
    }

    /// The local samples per query (`generated_samples_per_query`).
    pub fn samples_per_query(&self) -> usize {
        self.spq
    }

    /// Queries generated so far.
    pub fn generated(&self) -> u64 {
        self.timeline.generated
    }

    /// Offset of the step after the last generated query; once `next_query`
    /// returned `None` this is `generated_query_duration`.
    pub fn duration_ns(&self) -> i64 {
        self.timeline.ts
    }

    /// The loaded list the queries are drawn from.
    pub fn loaded(&self) -> &[QuerySampleIndex] {
        &self.loaded
    }

    /// Clears `out`, fills it with the next query's QSL indices and returns the
    /// query's scheduled offset from the series start (ns); `None` at the end.
    #[inline]
    pub fn next_query(&mut self, out: &mut Vec<QuerySampleIndex>) -> Option<i64> {
        if !self.timeline.has_next() {
            return None;
        }
        out.clear();
        match self.shape {
            Shape::Single => {
                for _ in 0..self.spq {
                    let pos = self.next_position();
                    out.push(self.loaded[pos]);
                }
            }
            Shape::Contiguous => {
                let start = self.next_position();
                let len = self.loaded.len();
                if start + self.spq <= len {
                    out.extend_from_slice(&self.loaded[start..start + self.spq]);
                } else {
                    // Only reachable with an out-of-range same index or a
                    // padding shorter than spq - 1; wrap instead of failing.
                    out.extend((0..self.spq).map(|i| self.loaded[(start + i) % len]));
                }
            }
            Shape::Offline => self.fill_offline(out),
        }
        Some(self.timeline.advance())
    }

    /// Next loaded position for one sample (SingleStream/Server) or one
    /// query start (MultiStream).
    #[inline]
    fn next_position(&mut self) -> usize {
        let len = self.loaded.len();
        match self.pick {
            Pick::Random => {
                let last = (self.dist_end as u64).saturating_sub(1);
                self.sample_rng.uniform_int(0, last) as usize
            }
            Pick::Ordered => {
                // The official LoadGen's lists are long enough in every valid setting;
                // wrapping mirrors its modulo for the equal-issue list.
                let Some(len) = std::num::NonZeroUsize::new(self.order.len()) else {
                    return 0;
                };
                let pos = self.order[self.cursor % len];
                self.cursor += 1;
                pos
            }
            Pick::Same => self.same % len,
        }
    }

    fn fill_offline(&mut self, out: &mut Vec<QuerySampleIndex>) {
        let len = self.loaded.len();
        out.reserve(self.spq);
        if self.pick == Pick::Same {
            let v = self.loaded[self.same % len];
            out.resize(self.spq, v);
            return;
        }
        for _ in 0..self.spq / len {
            let start = out.len();
            out.extend_from_slice(&self.loaded);
            if self.shuffle_passes {
                self.sample_rng.shuffle(&mut out[start..]);
            }
        }
        out.extend_from_slice(&self.loaded[..self.spq % len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadable::generate_loadable_sets;
    use crate::settings::{TestMode, TestSettings};

    /// Straightforward pre-generation of a whole series, written directly
    /// after `GenerateQueries` (everything stored), to check the incremental
    /// generator against.
    fn reference(
        eff: &EffectiveSettings,
        set: &LoadableSet,
        kind: RunKind,
    ) -> (Vec<(Vec<usize>, i64)>, usize, i64) {
        let l = &set.samples;
        let e = set.distribution_end;
        let k = if eff.scenario == Scenario::Server {
            1
        } else {
            2
        };
        let mut gen = k * eff.target_duration_ms as i64 * 1_000_000;
        let mut min_q = eff.min_query_count as usize;
        let mut spq = eff.samples_per_query as usize;
        if kind == RunKind::Accuracy && eff.scenario == Scenario::Offline {
            spq = e;
        }
        if kind == RunKind::Accuracy || eff.performance_issue_unique {
            gen = 0;
            min_q = l.len() / spq;
        }
        let mut rng = Mt19937::new(eff.sample_index_rng_seed);
        let mut sched = Mt19937::new(eff.schedule_rng_seed);
        let ms = eff.scenario == Scenario::MultiStream;
        let stride = if ms { spq } else { 1 };
        let mut acc: Vec<usize> = (0..e).step_by(stride).collect();
        if kind == RunKind::Accuracy {
            rng.shuffle(&mut acc);
        }
        let mut unique: Vec<usize> = (0..e).step_by(stride).collect();
        rng.shuffle(&mut unique);
        let mut perm: Vec<usize> = (0..l.len()).collect();
        let mut eq = Vec::new();
        let mut j = 0;
        while j < min_q {
            rng.shuffle(&mut perm);
            eq.extend_from_slice(&perm);
            j += l.len();
        }
        let ei = eff.sample_concatenate_permutation;
        if kind != RunKind::Accuracy && ei {
            if eff.scenario == Scenario::Offline {
                let rem = spq % l.len();
                if rem > 0 {
                    spq += l.len() - rem;
                }
            } else {
                let rem = min_q % l.len();
                if rem > 0 {
                    min_q += l.len() - rem;
                }
            }
        }
        let same = eff.performance_issue_same_index as usize;
        let (mut ai, mut ui, mut qi) = (0, 0, 0);
        let mut queries = Vec::new();
        let (mut ts, mut prev) = (0i64, 0i64);
        while prev < gen || queries.len() < min_q {
            let mut s = Vec::new();
            let mut rand_pos = |rng: &mut Mt19937| {
                if kind == RunKind::Accuracy {
                    ai += 1;
                    acc[ai - 1]
                } else {
                    rng.uniform_int(0, e as u64 - 1) as usize
                }
            };
            match eff.scenario {
                Scenario::MultiStream => {
                    let start = if eff.performance_issue_unique {
                        ui += 1;
                        unique[ui - 1]
                    } else if eff.performance_issue_same {
                        same
                    } else {
                        rand_pos(&mut rng)
                    };
                    s.extend_from_slice(&l[start..start + spq]);
                }
                Scenario::Offline => {
                    if eff.performance_issue_same {
                        s = vec![l[same]; spq];
                    } else {
                        for _ in 0..spq / l.len() {
                            let mut c = l.clone();
                            if ei {
                                rng.shuffle(&mut c);
                            }
                            s.extend(c);
                        }
                        s.extend_from_slice(&l[..spq % l.len()]);
                    }
                }
                _ => {
                    for _ in 0..spq {
                        let pos = if eff.performance_issue_unique {
                            ui += 1;
                            unique[ui - 1]
                        } else if eff.performance_issue_same {
                            same
                        } else if ei {
                            qi += 1;
                            eq[(qi - 1) % eq.len()]
                        } else {
                            rand_pos(&mut rng)
                        };
                        s.push(l[pos]);
                    }
                }
            }
            queries.push((s, ts));
            prev = ts;
            ts += if eff.scenario == Scenario::Server {
                seconds_to_ns(sched.exponential(eff.target_qps))
            } else {
                seconds_to_ns(1.0 / eff.target_qps)
            };
            if ei && queries.len() >= min_q && prev < gen && eff.scenario != Scenario::Offline {
                min_q += l.len();
            }
        }
        (queries, spq, ts)
    }

    fn run_all(
        eff: &EffectiveSettings,
        set: &LoadableSet,
        kind: RunKind,
    ) -> Vec<(Vec<usize>, i64)> {
        let mut g = QueryGenerator::new(eff, set, kind);
        let mut out = Vec::new();
        let mut v = Vec::new();
        while let Some(ts) = g.next_query(&mut out) {
            v.push((out.clone(), ts));
        }
        v
    }

    fn settings(scenario: Scenario) -> TestSettings {
        TestSettings {
            scenario,
            mode: TestMode::PerformanceOnly,
            min_duration_ms: 0,
            min_query_count: 50,
            qsl_rng_seed: 2085463073848966840,
            sample_index_rng_seed: 2747215439041700203,
            schedule_rng_seed: 16159082839903944936,
            ..TestSettings::default()
        }
    }

    /// Compares every series of a run with the reference generation.
    fn compare(req: &TestSettings, total: usize, perf: usize) -> Vec<Vec<(Vec<usize>, i64)>> {
        let (eff, _) = EffectiveSettings::derive(req, total, perf);
        let mut all = Vec::new();
        for kind in [RunKind::Accuracy, RunKind::Performance] {
            let count = match kind {
                RunKind::Accuracy => eff.accuracy_sample_count,
                RunKind::Performance => eff.performance_sample_count,
            } as usize;
            let mut sets = generate_loadable_sets(&eff, count, total);
            if kind == RunKind::Performance {
                sets.truncate(1);
            }
            for set in &sets {
                let got = run_all(&eff, set, kind);
                let (want, spq, dur) = reference(&eff, set, kind);
                assert_eq!(got, want, "{req:?} {kind:?}");
                let plan = QueryGenerator::plan(&eff, set, kind);
                assert_eq!(plan.query_count, want.len() as u64);
                assert_eq!(plan.samples_per_query, spq as u64);
                assert_eq!(plan.duration_ns, dur);
                assert_eq!(
                    plan.sample_count,
                    want.iter().map(|q| q.0.len() as u64).sum::<u64>()
                );
                all.push(got);
            }
        }
        all
    }

    #[test]
    fn matches_reference_across_settings() {
        for scenario in Scenario::ALL {
            for (unique, same, equal) in [
                (false, false, false),
                (true, false, false),
                (false, true, false),
                (false, false, true),
                (true, false, true),
                (false, true, true),
            ] {
                for (total, perf, min_q, dur) in
                    [(100, 40, 50, 0), (30, 30, 7, 0), (64, 16, 10, 30)]
                {
                    let mut r = settings(scenario);
                    r.performance_issue_unique = unique;
                    r.performance_issue_same = same;
                    r.performance_issue_same_index = 3;
                    r.sample_concatenate_permutation = equal;
                    r.min_query_count = min_q;
                    r.min_duration_ms = dur;
                    r.multi_stream_samples_per_query = 4;
                    r.server_target_qps = 500.0;
                    r.offline_expected_qps = 1000.0;
                    if unique && equal && scenario == Scenario::MultiStream {
                        // The official LoadGen's unique list runs out here (an exception).
                        continue;
                    }
                    compare(&r, total, perf);
                }
            }
        }
    }

    #[test]
    fn issue_unique_uses_each_loaded_sample_once() {
        let mut r = settings(Scenario::SingleStream);
        r.performance_issue_unique = true;
        let series = compare(&r, 100, 40);
        let perf = series.last().unwrap();
        let mut seen: Vec<usize> = perf.iter().map(|q| q.0[0]).collect();
        assert_eq!(seen.len(), 40);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 40);
    }

    #[test]
    fn issue_same_repeats_one_sample() {
        for scenario in Scenario::ALL {
            let mut r = settings(scenario);
            r.performance_issue_same = true;
            r.performance_issue_same_index = 5;
            r.multi_stream_samples_per_query = 3;
            let (eff, _) = EffectiveSettings::derive(&r, 100, 40);
            let set = &generate_loadable_sets(&eff, 40, 100)[0];
            let got = run_all(&eff, set, RunKind::Performance);
            assert!(!got.is_empty());
            for (q, _) in &got {
                if scenario == Scenario::MultiStream {
                    assert_eq!(q[..], set.samples[5..8]);
                } else {
                    assert!(q.iter().all(|&x| x == set.samples[5]), "{scenario:?}");
                }
            }
        }
    }

    #[test]
    fn multistream_accuracy_covers_the_set() {
        let mut r = settings(Scenario::MultiStream);
        r.multi_stream_samples_per_query = 8;
        let (eff, _) = EffectiveSettings::derive(&r, 100, 100);
        let set = &generate_loadable_sets(&eff, 100, 100)[0];
        assert_eq!(set.samples.len(), 107);
        let got = run_all(&eff, set, RunKind::Accuracy);
        assert_eq!(got.len(), 13);
        let mut all: Vec<usize> = got.iter().flat_map(|q| q.0.iter().copied()).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn equal_issue_duration_bumps_to_multiples() {
        let mut r = settings(Scenario::Server);
        r.sample_concatenate_permutation = true;
        r.min_query_count = 10;
        r.min_duration_ms = 100;
        r.server_target_qps = 1000.0;
        let series = compare(&r, 64, 16);
        let perf = series.last().unwrap();
        assert_eq!(perf.len() % 16, 0);
        let mut counts = [0usize; 16];
        for (q, _) in perf {
            counts[q[0]] += 1;
        }
        assert!(counts.iter().all(|&c| c == counts[0]));
        // Generation only stops once a query is scheduled at or past the
        // duration.
        assert!(perf.last().unwrap().1 >= 100_000_000);
    }

    #[test]
    fn offline_single_query() {
        let mut r = settings(Scenario::Offline);
        r.min_query_count = 70;
        let (eff, _) = EffectiveSettings::derive(&r, 100, 30);
        let set = &generate_loadable_sets(&eff, 30, 100)[0];
        let got = run_all(&eff, set, RunKind::Performance);
        assert_eq!(got.len(), 1);
        let q = &got[0].0;
        assert_eq!(q.len(), 70);
        assert_eq!(q[..30], set.samples[..]);
        assert_eq!(q[30..60], set.samples[..]);
        assert_eq!(q[60..], set.samples[..10]);
        let plan = QueryGenerator::plan(&eff, set, RunKind::Performance);
        assert_eq!(plan.duration_ns, 1_000_000_000);
    }

    #[test]
    fn empty_set_generates_nothing() {
        let (eff, _) = EffectiveSettings::derive(&settings(Scenario::SingleStream), 0, 0);
        let set = LoadableSet {
            samples: Vec::new(),
            distribution_end: 0,
        };
        for kind in [RunKind::Accuracy, RunKind::Performance] {
            assert!(run_all(&eff, &set, kind).is_empty());
            assert_eq!(QueryGenerator::plan(&eff, &set, kind).query_count, 0);
        }
    }

    /// Rough cost of one single-sample query (run with
    /// `cargo test --release -- --ignored next_query_cost --nocapture`).
    #[test]
    #[ignore]
    fn next_query_cost() {
        let mut r = settings(Scenario::Server);
        r.min_query_count = 2_000_000;
        r.server_target_qps = 1e6;
        let (eff, _) = EffectiveSettings::derive(&r, 1024, 1024);
        let set = &generate_loadable_sets(&eff, 1024, 1024)[0];
        let mut g = QueryGenerator::new(&eff, set, RunKind::Performance);
        let mut out = Vec::with_capacity(1);
        let t = std::time::Instant::now();
        let mut n = 0u64;
        let mut acc = 0usize;
        while g.next_query(&mut out).is_some() {
            acc ^= out[0];
            n += 1;
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("{n} queries, {ns:.1} ns per query ({acc})");
    }
}
