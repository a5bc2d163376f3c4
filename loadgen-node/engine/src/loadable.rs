//! Loadable sets: which samples are loaded, in which order (`loadgen.cc`, `GenerateLoadableSets`).

use crate::rng::Mt19937;
use crate::settings::{EffectiveSettings, Scenario};
use crate::sut::QuerySampleIndex;

/// One set of samples loaded together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadableSet {
    /// Load order, including MultiStream padding.
    pub samples: Vec<QuerySampleIndex>,
    /// Length before padding.
    pub distribution_end: usize,
}

/// `count` = performance_sample_count (performance runs) or
/// accuracy_sample_count (accuracy runs); `total` = QSL total sample count.
///
/// The candidates are `0 .. min(count, total)` shuffled with a fresh
/// `qsl_rng`, cut into chunks of `performance_sample_count`; in MultiStream
/// each chunk is followed by a copy of its first `spq - 1` entries so that a
/// query may start anywhere below the distribution end.
pub fn generate_loadable_sets(
    eff: &EffectiveSettings,
    count: usize,
    total: usize,
) -> Vec<LoadableSet> {
    let n = count.min(total);
    let mut candidates: Vec<QuerySampleIndex> = (0..n).collect();
    Mt19937::new(eff.qsl_rng_seed).shuffle(&mut candidates);

    // A zero chunk size never fills a chunk the official LoadGen: everything is one set.
    let chunk = match usize::try_from(eff.performance_sample_count) {
        Ok(0) | Err(_) => n.max(1),
        Ok(c) => c,
    };
    let padding = if eff.scenario == Scenario::MultiStream {
        usize::try_from(eff.samples_per_query.saturating_sub(1)).unwrap_or(usize::MAX)
    } else {
        0
    };

    candidates
        .chunks(chunk)
        .map(|c| {
            let mut samples = Vec::with_capacity(c.len().saturating_add(padding));
            samples.extend_from_slice(c);
            // Reading from the growing list repeats the chunk cyclically when
            // the padding is longer than the chunk, as the official LoadGen does.
            for i in 0..padding {
                let v = samples[i];
                samples.push(v);
            }
            LoadableSet {
                samples,
                distribution_end: c.len(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::TestSettings;

    fn eff(scenario: Scenario, perf: usize, spq: u64) -> EffectiveSettings {
        let req = TestSettings {
            scenario,
            multi_stream_samples_per_query: spq,
            qsl_rng_seed: 7,
            ..TestSettings::default()
        };
        EffectiveSettings::derive(&req, 1000, perf).0
    }

    #[test]
    fn performance_set_is_a_permutation_of_the_prefix() {
        let e = eff(Scenario::SingleStream, 256, 1);
        let sets = generate_loadable_sets(&e, 256, 5000);
        assert_eq!(sets.len(), 1);
        let mut s = sets[0].samples.clone();
        assert_eq!(sets[0].distribution_end, 256);
        s.sort_unstable();
        assert_eq!(s, (0..256).collect::<Vec<_>>());

        let mut expected: Vec<usize> = (0..256).collect();
        Mt19937::new(7).shuffle(&mut expected);
        assert_eq!(sets[0].samples, expected);
    }

    #[test]
    fn accuracy_chunks_and_last_shorter() {
        let e = eff(Scenario::SingleStream, 256, 1);
        let sets = generate_loadable_sets(&e, 600, 600);
        let lens: Vec<_> = sets.iter().map(|s| s.samples.len()).collect();
        assert_eq!(lens, [256, 256, 88]);
        let all: Vec<usize> = sets
            .iter()
            .flat_map(|s| s.samples.iter().copied())
            .collect();
        let mut expected: Vec<usize> = (0..600).collect();
        Mt19937::new(7).shuffle(&mut expected);
        assert_eq!(all, expected);
    }

    #[test]
    fn multistream_padding() {
        let e = eff(Scenario::MultiStream, 10, 4);
        let sets = generate_loadable_sets(&e, 25, 25);
        assert_eq!(sets.len(), 3);
        for s in &sets {
            let end = s.distribution_end;
            assert_eq!(s.samples.len(), end + 3);
            assert_eq!(s.samples[end..], s.samples[..3]);
        }
        // The 5-element last chunk followed by its first 3.
        assert_eq!(sets[2].distribution_end, 5);

        // Padding longer than the chunk repeats it cyclically.
        let e = eff(Scenario::MultiStream, 2, 6);
        let sets = generate_loadable_sets(&e, 3, 3);
        let last = &sets[1].samples;
        assert_eq!(last.len(), 6);
        assert!(last.iter().all(|&x| x == last[0]));
    }
}
