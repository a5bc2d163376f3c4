//! The command line of the `sut-node` binary: the option structs of the
//! backends, with their flags, defaults and help, and their conversion into
//! the library's plain option types. The library itself knows nothing of
//! clap's derives, so it can be driven by other front ends (tests, benches,
//! config files).

pub mod health;
pub mod kserve;
#[cfg(feature = "llm")]
pub mod llm;
pub mod logs;
#[cfg(feature = "onnx")]
pub mod onnx;
pub mod openai;
pub mod serve;

#[cfg(test)]
mod tests;
