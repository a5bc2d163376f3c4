//! The answer's bytes in a KServe v2 response: raw output contents as they
//! are, typed contents as the same little-endian bytes.

use bytes::{BufMut, Bytes, BytesMut};

use super::pb::{InferTensorContents, ModelInferResponse};

/// The bytes of the output named `name` (else the first): its raw contents,
/// or its typed contents as the same little-endian bytes.
pub(super) fn output_bytes(
    response: &ModelInferResponse,
    name: Option<&str>,
) -> Result<Bytes, String> {
    let index = match name {
        Some(name) => response
            .outputs
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = response.outputs.iter().map(|t| t.name.as_str()).collect();
                format!("the inference server's response has no output {name:?} (it has {names:?})")
            })?,
        None if response.outputs.is_empty() && response.raw_output_contents.is_empty() => {
            return Err("the inference server's response has no output".into())
        }
        None => 0,
    };
    if let Some(raw) = response.raw_output_contents.get(index) {
        return Ok(raw.clone());
    }
    let tensor = response
        .outputs
        .get(index)
        .ok_or("the inference server's response has no output")?;
    let contents = tensor
        .contents
        .as_ref()
        .ok_or_else(|| format!("output {:?} has no contents", tensor.name))?;
    typed_to_bytes(&tensor.datatype, contents).map_err(|e| format!("output {:?}: {e}", tensor.name))
}

/// Typed tensor contents as raw little-endian bytes of `datatype`, the layout
/// of `raw_output_contents` (BYTES elements with 4-byte length prefixes).
pub(super) fn typed_to_bytes(datatype: &str, c: &InferTensorContents) -> Result<Bytes, String> {
    let mut out = BytesMut::new();
    match datatype {
        "BOOL" => c
            .bool_contents
            .iter()
            .for_each(|v| out.put_u8(u8::from(*v))),
        "INT8" => c.int_contents.iter().for_each(|v| out.put_i8(*v as i8)),
        "INT16" => c
            .int_contents
            .iter()
            .for_each(|v| out.put_i16_le(*v as i16)),
        "INT32" => c.int_contents.iter().for_each(|v| out.put_i32_le(*v)),
        "INT64" => c.int64_contents.iter().for_each(|v| out.put_i64_le(*v)),
        "UINT8" => c.uint_contents.iter().for_each(|v| out.put_u8(*v as u8)),
        "UINT16" => c
            .uint_contents
            .iter()
            .for_each(|v| out.put_u16_le(*v as u16)),
        "UINT32" => c.uint_contents.iter().for_each(|v| out.put_u32_le(*v)),
        "UINT64" => c.uint64_contents.iter().for_each(|v| out.put_u64_le(*v)),
        "FP32" => c.fp32_contents.iter().for_each(|v| out.put_f32_le(*v)),
        "FP64" => c.fp64_contents.iter().for_each(|v| out.put_f64_le(*v)),
        "BYTES" => {
            for v in &c.bytes_contents {
                let len = u32::try_from(v.len()).map_err(|_| "an element over 4 GiB")?;
                out.put_u32_le(len);
                out.extend_from_slice(v);
            }
        }
        other => return Err(format!("datatype {other:?} has no typed contents")),
    }
    Ok(out.freeze())
}
