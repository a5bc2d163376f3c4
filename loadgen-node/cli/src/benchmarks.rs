//! The benchmarks of the suite, as both ends of the protocol know them.

pub use facts::benchmarks::*;
