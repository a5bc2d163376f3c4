//! Where the model runs, as `--device` names it.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The CPU.
    #[default]
    Cpu,
    /// A CUDA GPU, by ordinal.
    Cuda(usize),
}

/// A `--device` value that is not `cpu`, `cuda` or `cuda:N`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid device {0:?} (expected cpu, cuda or cuda:N)")]
pub struct ParseDeviceError(String);

impl FromStr for DeviceSpec {
    type Err = ParseDeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Self::Cuda)
                .ok_or_else(|| ParseDeviceError(s.to_string())),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}
