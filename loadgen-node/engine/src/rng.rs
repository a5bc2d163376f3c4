//! Bit-exact random streams (as the official LoadGen draws them in `loadgen.cc`: `GenerateLoadableSets`, `SampleDistribution`, `ScheduleDistribution`): std::mt19937 and the libstdc++ (GCC >= 11)
//! distribution algorithms LoadGen uses.

/// Engine range `max() - min()` of std::mt19937.
const ENGINE_RANGE: u64 = u32::MAX as u64;

/// 32-bit Mersenne Twister seeded like `std::mt19937(seed)` (low 32 bits).
#[derive(Clone)]
pub(crate) struct Mt19937 {
    inner: rand_mt::Mt,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937").finish_non_exhaustive()
    }
}

impl Default for Mt19937 {
    /// A default-constructed `std::mt19937` (seed 5489).
    fn default() -> Self {
        Self::new(5489)
    }
}

impl Mt19937 {
    pub(crate) fn new(seed: u64) -> Self {
        // libstdc++ reduces the seed modulo 2^32; rand_mt's seeding recurrence
        // is the standard one, so the streams are identical.
        Self {
            inner: rand_mt::Mt::new(seed as u32),
        }
    }

    #[inline]
    pub(crate) fn next_u32(&mut self) -> u32 {
        self.inner.next_u32()
    }

    /// `std::uniform_int_distribution<u64>(lo, hi)` (inclusive).
    #[inline]
    pub(crate) fn uniform_int(&mut self, lo: u64, hi: u64) -> u64 {
        lo.wrapping_add(self.uniform_span(hi.wrapping_sub(lo)))
    }

    /// A value in `[0, span]`, following libstdc++'s three branches.
    #[inline]
    fn uniform_span(&mut self, span: u64) -> u64 {
        if span < ENGINE_RANGE {
            self.lemire(span + 1)
        } else if span == ENGINE_RANGE {
            u64::from(self.next_u32())
        } else {
            self.upscale(span)
        }
    }

    /// Lemire's nearly-divisionless down-scaling; `n` < 2^32.
    #[inline]
    fn lemire(&mut self, n: u64) -> u64 {
        let mut prod = u64::from(self.next_u32()) * n;
        let mut low = prod as u32;
        let n32 = n as u32;
        if low < n32 {
            let threshold = n32.wrapping_neg() % n32;
            while low < threshold {
                prod = u64::from(self.next_u32()) * n;
                low = prod as u32;
            }
        }
        prod >> 32
    }

    /// Ranges wider than 32 bits: a high part drawn recursively plus one raw
    /// draw, rejected when it overshoots or wraps.
    #[cold]
    fn upscale(&mut self, span: u64) -> u64 {
        loop {
            let hi = self.uniform_span(span >> 32);
            let tmp = hi.wrapping_shl(32);
            let k = tmp.wrapping_add(u64::from(self.next_u32()));
            if k <= span && k >= tmp {
                return k;
            }
        }
    }

    /// `std::shuffle(v.begin(), v.end(), *this)`.
    pub(crate) fn shuffle<T>(&mut self, v: &mut [T]) {
        let n = v.len();
        if n <= 1 {
            return;
        }
        let n64 = n as u64;
        if ENGINE_RANGE / n64 >= n64 {
            // One draw places two elements: x in [0, r(r+1)) splits into
            // x / (r+1) and x % (r+1).
            let mut i = 1usize;
            if n & 1 == 0 {
                let j = self.uniform_span(1) as usize;
                v.swap(1, j);
                i = 2;
            }
            while i < n {
                let r = i as u64 + 1;
                let x = self.uniform_span(r * (r + 1) - 1);
                v.swap(i, (x / (r + 1)) as usize);
                v.swap(i + 1, (x % (r + 1)) as usize);
                i += 2;
            }
        } else {
            for i in 1..n {
                let j = self.uniform_span(i as u64) as usize;
                v.swap(i, j);
            }
        }
    }

    /// Consumes exactly the draws `shuffle` makes on `n` elements, without
    /// moving anything (the number of draws never depends on the contents).
    pub(crate) fn skip_shuffle(&mut self, n: usize) {
        if n <= 1 {
            return;
        }
        let n64 = n as u64;
        if ENGINE_RANGE / n64 >= n64 {
            let mut i = 1usize;
            if n & 1 == 0 {
                self.uniform_span(1);
                i = 2;
            }
            while i < n {
                let r = i as u64 + 1;
                self.uniform_span(r * (r + 1) - 1);
                i += 2;
            }
        } else {
            for i in 1..n {
                self.uniform_span(i as u64);
            }
        }
    }

    /// `std::generate_canonical<double, 53>`: two draws, low word first.
    #[inline]
    pub(crate) fn canonical(&mut self) -> f64 {
        let lo = f64::from(self.next_u32());
        let hi = f64::from(self.next_u32());
        let sum = lo + hi * 4_294_967_296.0;
        let r = sum / 18_446_744_073_709_551_616.0;
        if r >= 1.0 {
            // Largest double below 1 (1 - 2^-53).
            1.0 - f64::EPSILON / 2.0
        } else {
            r
        }
    }

    /// `std::uniform_real_distribution<double>(a, b)`; the engine draws
    /// none, the tests use it to pin `canonical` against libstdc++.
    #[cfg(test)]
    pub(crate) fn uniform_real(&mut self, a: f64, b: f64) -> f64 {
        self.canonical() * (b - a) + a
    }

    /// `std::exponential_distribution<double>(lambda)`.
    #[inline]
    pub(crate) fn exponential(&mut self, lambda: f64) -> f64 {
        -(1.0 - self.canonical()).ln() / lambda
    }
}

/// Seconds (f64) to whole nanoseconds, truncating like the official LoadGen.
#[inline]
pub(crate) fn seconds_to_ns(s: f64) -> i64 {
    (s * 1e9) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values below come from libstdc++ 12 (std::mt19937,
    // uniform_int_distribution<uint64_t>, std::shuffle, generate_canonical,
    // exponential_distribution).

    #[test]
    fn mt19937_check_values() {
        let mut g = Mt19937::new(0);
        assert_eq!((g.next_u32(), g.next_u32()), (2357136044, 2546248239));
        let mut g = Mt19937::new(5489);
        assert_eq!((g.next_u32(), g.next_u32()), (3499211612, 581869302));
        let mut g = Mt19937::new(2085463073848966840);
        assert_eq!((g.next_u32(), g.next_u32()), (144363858, 3947231266));
        let mut g = Mt19937::default();
        for _ in 0..9999 {
            g.next_u32();
        }
        // The C++ standard's required 10000th output of a default mt19937.
        assert_eq!(g.next_u32(), 4123659995);
    }

    #[test]
    fn seed_uses_low_32_bits() {
        let mut a = Mt19937::new(0x1234_5678_0000_0007);
        let mut b = Mt19937::new(7);
        for _ in 0..700 {
            assert_eq!(a.next_u32(), b.next_u32());
        }
    }

    #[test]
    fn uniform_int_all_branches() {
        let mut g = Mt19937::new(42);
        let cases: [(u64, u64, [u64; 5]); 11] = [
            (0, 0, [0, 0, 0, 0, 0]),
            (0, 1, [1, 1, 1, 0, 0]),
            (0, 9, [1, 0, 0, 4, 8]),
            (5, 1004, [338, 606, 147, 713, 655]),
            (
                0,
                4294967294,
                [88409748, 242285875, 4165731072, 3100961110, 3575313898],
            ),
            (
                0,
                4294967295,
                [4031053213, 911989541, 3344769, 780932287, 4261516219],
            ),
            (
                0,
                4294967296,
                [2652062880, 2627030329, 99052376, 2253890010, 200427519],
            ),
            (
                0,
                (1 << 40) + 12345,
                [
                    326304795323,
                    404726671118,
                    502900325309,
                    865944374205,
                    220685993835,
                ],
            ),
            (
                0,
                u64::MAX,
                [
                    9485951042881651955,
                    10928120008332396024,
                    856858769658023396,
                    11207224383056159366,
                    3145614893971139400,
                ],
            ),
            (
                100,
                3000000000,
                [195154876, 39794972, 2846656598, 2826605268, 2896896109],
            ),
            (
                0,
                2147483648,
                [827675644, 34287276, 495840704, 517598253, 555725777],
            ),
        ];
        for (lo, hi, expected) in cases {
            let got: Vec<u64> = (0..5).map(|_| g.uniform_int(lo, hi)).collect();
            assert_eq!(got, expected, "uniform_int({lo}, {hi})");
        }
    }

    #[test]
    fn uniform_int_small_range_from_zero_seed() {
        let mut g = Mt19937::new(0);
        let got: Vec<u64> = (0..5).map(|_| g.uniform_int(0, 1023)).collect();
        assert_eq!(got, [561, 607, 732, 864, 617]);
    }

    fn iota(n: usize) -> Vec<u32> {
        (0..n as u32).collect()
    }

    fn hash(v: &[u32]) -> u64 {
        v.iter().fold(0u64, |h, &x| {
            h.wrapping_mul(1_000_003).wrapping_add(u64::from(x))
        })
    }

    #[test]
    fn shuffle_small() {
        let mut g = Mt19937::new(7);
        let mut v = iota(10);
        g.shuffle(&mut v);
        assert_eq!(v, [2, 7, 6, 8, 1, 5, 3, 0, 4, 9]);
        assert_eq!(g.next_u32(), 4201435347);

        let mut g = Mt19937::new(7);
        let mut v = iota(11);
        g.shuffle(&mut v);
        assert_eq!(v, [3, 0, 7, 2, 10, 4, 5, 1, 6, 8, 9]);
        assert_eq!(g.next_u32(), 4201435347);

        let mut g = Mt19937::new(7);
        let mut v = iota(1);
        g.shuffle(&mut v);
        assert_eq!(g.next_u32(), 327741615, "n = 1 draws nothing");

        let mut g = Mt19937::new(7);
        let mut v = iota(2);
        g.shuffle(&mut v);
        assert_eq!(v, [1, 0]);
        assert_eq!(g.next_u32(), 976413892);

        let mut g = Mt19937::new(7);
        let mut v: Vec<u32> = Vec::new();
        g.shuffle(&mut v);
        assert_eq!(g.next_u32(), 327741615, "n = 0 draws nothing");
    }

    #[test]
    fn shuffle_large_variants() {
        let mut g = Mt19937::new(9);
        let mut v = iota(65535);
        g.shuffle(&mut v);
        assert_eq!(hash(&v), 2457252754107397117);
        assert_eq!(g.next_u32(), 1575741144);

        let mut g = Mt19937::new(9);
        let mut v = iota(65536);
        g.shuffle(&mut v);
        assert_eq!(hash(&v), 3808230988618130440);
        assert_eq!(g.next_u32(), 640862471);

        let mut g = Mt19937::new(9);
        let mut v = iota(100000);
        g.shuffle(&mut v);
        assert_eq!((v[0], v[1], v[99999]), (39437, 53659, 17228));
        assert_eq!(hash(&v), 6341373170130574348);
        assert_eq!(g.next_u32(), 3936768079);
    }

    #[test]
    fn skip_shuffle_consumes_like_shuffle() {
        for n in [0usize, 1, 2, 3, 10, 11, 256, 65535, 65536, 70000] {
            let mut a = Mt19937::new(n as u64);
            let mut b = a.clone();
            let mut v = iota(n);
            a.shuffle(&mut v);
            b.skip_shuffle(n);
            assert_eq!(a.next_u32(), b.next_u32(), "n = {n}");
        }
    }

    #[test]
    fn canonical_and_uniform_real() {
        let mut g = Mt19937::new(3);
        let expected = [
            0.07072488045105661,
            0.8399490424683662,
            0.12132857932963054,
            0.5693113257900876,
        ];
        for e in expected {
            assert_eq!(g.canonical().to_bits(), f64::to_bits(e));
        }
        let mut g = Mt19937::new(3);
        assert_eq!(
            g.uniform_real(0.0, 1.0).to_bits(),
            f64::to_bits(0.07072488045105661)
        );
    }

    #[test]
    fn exponential_schedule() {
        let mut g = Mt19937::new(16159082839903944936);
        let expected = [
            (0.001843654016915528, 1843654),
            (0.0004579236887057526, 457923),
            (0.001285862316514947, 1285862),
            (0.0007129947239981172, 712994),
            (0.0003864066258131285, 386406),
        ];
        for (x, ns) in expected {
            let got = g.exponential(1000.0);
            assert_eq!(got.to_bits(), f64::to_bits(x));
            assert_eq!(seconds_to_ns(got), ns);
        }
    }

    #[test]
    fn seconds_to_ns_truncates() {
        assert_eq!(seconds_to_ns(1.0 / 1000.0), 1_000_000);
        assert_eq!(seconds_to_ns(1.0 / 125.0), 8_000_000);
        assert_eq!(seconds_to_ns(1.0 / 3.0), 333_333_333);
        assert_eq!(seconds_to_ns(-1.5e-9), -1);
    }
}
