//! loadgen-node's exit statuses: the scheme both binaries share
//! (`facts::exit`), so that scripts and the commands that run other runs
//! read them the same way.

pub use facts::exit::Exit;
