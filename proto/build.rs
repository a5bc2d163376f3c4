//! Generates the message and service code from `proto/sutnode.proto` with a
//! protoc that ships as a crate, so no system protobuf install is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/sutnode.proto");
    tonic_prost_build::configure()
        // Payloads as `bytes::Bytes`: sample data is shared, not copied.
        .bytes(".")
        .compile_protos(&["proto/sutnode.proto"], &["proto"])?;
    Ok(())
}
