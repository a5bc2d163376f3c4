//! Which connection gets the next sample.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::QdlError;

/// Bound on the length of a weighted schedule (after dividing the weights by
/// their greatest common divisor), so that it stays a small table.
const MAX_SCHEDULE: u64 = 1 << 20;

/// How samples are spread over the nodes' connections.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DispatchPolicy {
    /// Each connection in turn, alternating between nodes (`round-robin`).
    RoundRobin,
    /// The connection with the fewest samples awaiting an answer; ties go
    /// round the connections (`least-outstanding`).
    #[default]
    LeastOutstanding,
    /// Node `i` gets `w[i]` of every `sum(w)` samples, interleaved; within a
    /// node, its least-loaded connection (`weighted:3,1,1`).
    Weighted(Vec<u32>),
}

impl DispatchPolicy {
    /// Checks the policy against the number of nodes.
    pub(crate) fn check(&self, nodes: usize) -> Result<(), QdlError> {
        if let DispatchPolicy::Weighted(w) = self {
            let bad = |reason: String| {
                Err(QdlError::Policy {
                    input: self.to_string(),
                    reason,
                })
            };
            if w.len() != nodes {
                return bad(format!(
                    "{} weights given for {nodes} nodes (one weight per node, in order)",
                    w.len()
                ));
            }
            if w.iter().all(|&x| x == 0) {
                return bad("at least one weight must be positive".into());
            }
            let g = w.iter().fold(0u32, |g, &x| gcd(g, x));
            let total: u64 = w.iter().map(|&x| u64::from(x / g)).sum();
            if total > MAX_SCHEDULE {
                return bad(format!(
                    "the weights are too fine-grained (their sum divided by their GCD is {total}, at most {MAX_SCHEDULE})"
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Display for DispatchPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DispatchPolicy::RoundRobin => f.write_str("round-robin"),
            DispatchPolicy::LeastOutstanding => f.write_str("least-outstanding"),
            DispatchPolicy::Weighted(w) => {
                let w: Vec<String> = w.iter().map(u32::to_string).collect();
                write!(f, "weighted:{}", w.join(","))
            }
        }
    }
}

impl FromStr for DispatchPolicy {
    type Err = QdlError;

    fn from_str(input: &str) -> Result<Self, QdlError> {
        let bad = |reason: String| QdlError::Policy {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        match s {
            "round-robin" => return Ok(DispatchPolicy::RoundRobin),
            "least-outstanding" => return Ok(DispatchPolicy::LeastOutstanding),
            _ => {}
        }
        let Some(list) = s.strip_prefix("weighted:") else {
            return Err(bad(
                "expected round-robin, least-outstanding or weighted:W1,W2,... (one weight per node)"
                    .into(),
            ));
        };
        let weights = list
            .split(',')
            .map(|w| {
                w.trim()
                    .parse::<u32>()
                    .map_err(|_| bad(format!("'{w}' is not a non-negative integer weight")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if weights.iter().all(|&w| w == 0) {
            return Err(bad("at least one weight must be positive".into()));
        }
        Ok(DispatchPolicy::Weighted(weights))
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

enum Kind {
    RoundRobin,
    LeastOutstanding,
    /// One node index per slot, spread out (smooth weighted round-robin).
    Weighted(Box<[usize]>),
}

/// The policy, compiled for `nodes * per_node` connections. Connection `c`
/// belongs to node `c / per_node`. Called on the issuing thread only, but
/// through `&self`, hence the atomic cursor (uncontended).
pub(crate) struct Dispatcher {
    kind: Kind,
    /// All connections, alternating between nodes: consecutive picks of
    /// round-robin (and tie-breaks) land on different nodes.
    order: Box<[usize]>,
    per_node: usize,
    cursor: AtomicUsize,
}

impl Dispatcher {
    /// `policy` must have passed `check(nodes)`.
    pub(crate) fn new(policy: &DispatchPolicy, nodes: usize, per_node: usize) -> Self {
        let order = (0..per_node)
            .flat_map(|k| (0..nodes).map(move |n| n * per_node + k))
            .collect();
        let kind = match policy {
            DispatchPolicy::RoundRobin => Kind::RoundRobin,
            DispatchPolicy::LeastOutstanding => Kind::LeastOutstanding,
            DispatchPolicy::Weighted(w) => Kind::Weighted(smooth_schedule(w)),
        };
        Self {
            kind,
            order,
            per_node,
            cursor: AtomicUsize::new(0),
        }
    }

    /// The connection for the next sample; `load(c)` is the number of samples
    /// connection `c` has outstanding.
    #[inline]
    pub(crate) fn pick(&self, load: impl Fn(usize) -> u64) -> usize {
        let p = self.cursor.fetch_add(1, Ordering::Relaxed);
        match &self.kind {
            Kind::RoundRobin => self.order[p % self.order.len()],
            Kind::LeastOutstanding => {
                let n = self.order.len();
                least_loaded((0..n).map(|j| self.order[(p + j) % n]), &load)
            }
            Kind::Weighted(schedule) => {
                let node = schedule[p % schedule.len()];
                let k = self.per_node;
                least_loaded((0..k).map(|j| node * k + (p + j) % k), &load)
            }
        }
    }
}

/// The first connection of `candidates` with the smallest load.
#[inline]
fn least_loaded(mut candidates: impl Iterator<Item = usize>, load: impl Fn(usize) -> u64) -> usize {
    let Some(mut best) = candidates.next() else {
        return 0;
    };
    let mut best_load = load(best);
    for c in candidates {
        if best_load == 0 {
            break;
        }
        let l = load(c);
        if l < best_load {
            best = c;
            best_load = l;
        }
    }
    best
}

/// nginx's smooth weighted round-robin over one period: node `i` appears
/// `w[i] / gcd` times, as evenly spread as possible.
fn smooth_schedule(weights: &[u32]) -> Box<[usize]> {
    let g = weights.iter().fold(0u32, |g, &x| gcd(g, x)).max(1);
    let w: Vec<i64> = weights.iter().map(|&x| i64::from(x / g)).collect();
    let total: i64 = w.iter().sum();
    let mut current = vec![0i64; w.len()];
    let mut out = Vec::with_capacity(total.max(1) as usize);
    for _ in 0..total {
        let mut best = 0;
        for i in 0..w.len() {
            current[i] += w[i];
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        out.push(best);
    }
    if out.is_empty() {
        out.push(0);
    }
    out.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_the_three_policies() {
        for s in ["round-robin", "least-outstanding", "weighted:3,1,1"] {
            assert_eq!(s.parse::<DispatchPolicy>().unwrap().to_string(), s);
        }
        assert_eq!(
            "weighted:3, 0,1".parse::<DispatchPolicy>().unwrap(),
            DispatchPolicy::Weighted(vec![3, 0, 1])
        );
        for bad in [
            "random",
            "weighted:",
            "weighted:1,x",
            "weighted:0,0",
            "weighted:-1",
        ] {
            let e = bad.parse::<DispatchPolicy>().unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn weights_must_match_the_nodes() {
        let w = DispatchPolicy::Weighted(vec![3, 1, 1]);
        assert!(w.check(3).is_ok());
        let e = w.check(2).unwrap_err().to_string();
        assert!(e.contains("3 weights given for 2 nodes"), "{e}");
        assert!(DispatchPolicy::Weighted(vec![u32::MAX, 1])
            .check(2)
            .is_err());
        assert!(DispatchPolicy::Weighted(vec![u32::MAX, u32::MAX])
            .check(2)
            .is_ok());
    }

    #[test]
    fn round_robin_alternates_nodes_then_connections() {
        let d = Dispatcher::new(&DispatchPolicy::RoundRobin, 3, 2);
        let picks: Vec<usize> = (0..7).map(|_| d.pick(|_| 0)).collect();
        // Connections 0,1 are node 0's; 2,3 node 1's; 4,5 node 2's.
        assert_eq!(picks, [0, 2, 4, 1, 3, 5, 0]);
    }

    #[test]
    fn least_outstanding_takes_the_least_loaded_and_spreads_ties() {
        let d = Dispatcher::new(&DispatchPolicy::LeastOutstanding, 2, 2);
        let loads = [5u64, 3, 9, 4];
        for _ in 0..8 {
            assert_eq!(d.pick(|c| loads[c]), 1);
        }
        let idle: Vec<usize> = (0..4).map(|_| d.pick(|_| 0)).collect();
        let mut sorted = idle.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1, 2, 3], "{idle:?}");
    }

    #[test]
    fn weighted_follows_the_weights_evenly() {
        assert_eq!(&*smooth_schedule(&[3, 1, 1]), &[0, 1, 0, 2, 0]);
        assert_eq!(&*smooth_schedule(&[6, 0, 2]), &[0, 0, 2, 0]);
        let d = Dispatcher::new(&DispatchPolicy::Weighted(vec![3, 1, 1]), 3, 2);
        let mut per_node = [0; 3];
        for _ in 0..500 {
            per_node[d.pick(|_| 0) / 2] += 1;
        }
        assert_eq!(per_node, [300, 100, 100]);
        // Within a node, its less loaded connection.
        let d = Dispatcher::new(&DispatchPolicy::Weighted(vec![1, 0]), 2, 2);
        assert_eq!(d.pick(|c| [7, 2, 0, 0][c]), 1);
    }
}
