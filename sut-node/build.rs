//! Generates the KServe v2 client (and, for the tests' fake server, the
//! server side) from `proto/kserve_v2.proto` with a protoc that ships as a
//! crate, so no system protobuf install is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/kserve_v2.proto");
    tonic_prost_build::configure()
        // Tensors as `bytes::Bytes`: a sample's input is sent without a copy.
        .bytes(".")
        .compile_protos(&["proto/kserve_v2.proto"], &["proto"])?;
    Ok(())
}
