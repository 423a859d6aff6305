//! Generates the CRI `runtime.v1` client from `proto/runtime_v1.proto` (client only; protoc from
//! Debian's `protobuf-compiler`, or `$PROTOC`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/runtime_v1.proto");
    tonic_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_protos(&["proto/runtime_v1.proto"], &["proto"])?;
    Ok(())
}
