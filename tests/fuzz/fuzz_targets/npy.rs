//! .npy files from a data set directory: the reader refuses bad headers and
//! shapes without panicking or allocating what the header claims.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = loadgen_cli::npy::parse(data);
});
