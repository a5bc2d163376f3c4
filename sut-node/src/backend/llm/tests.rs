//! The llm backend end to end, on tiny models built here.

use std::collections::HashMap;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::Tensor;

use super::*;

#[test]
fn parses_devices() {
    assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
    assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
    assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
    for bad in ["gpu", "cuda:", "cuda:x", ""] {
        assert!(bad.parse::<DeviceSpec>().is_err(), "{bad}");
    }
    assert_eq!(DeviceSpec::Cuda(1).to_string(), "cuda:1");
}

#[test]
fn refuses_missing_and_unknown_models() {
    let err = Llm::new(Path::new("/nonexistent/model.gguf"), LlmOptions::default())
        .err()
        .unwrap();
    assert!(err.to_string().contains("no such file"), "{err}");
    let dir = temp_dir("unknown");
    let file = dir.join("model.bin");
    std::fs::write(&file, b"x").unwrap();
    let err = Llm::new(&file, LlmOptions::default()).err().unwrap();
    assert!(err.to_string().contains("neither"), "{err}");
}

#[test]
fn cuda_without_the_feature_is_a_clear_error() {
    if cfg!(feature = "cuda") {
        return;
    }
    let dir = temp_dir("nocuda");
    let args = LlmOptions {
        device: DeviceSpec::Cuda(0),
        ..LlmOptions::default()
    };
    let err = Llm::new(&dir, args).err().unwrap().to_string();
    assert!(err.contains("--features cuda"), "{err}");
}

#[test]
fn broken_model_files_fail_the_warm_up() {
    let dir = temp_dir("broken");
    let gguf = dir.join("model.gguf");
    std::fs::write(&gguf, b"not gguf").unwrap();
    let llm = Llm::new(&gguf, LlmOptions::default()).unwrap();
    let err = llm.warm_up().unwrap_err().to_string();
    assert!(err.contains("GGUF"), "{err}");
    // A directory without config.json.
    let llm = Llm::new(&dir, LlmOptions::default()).unwrap();
    let err = llm.warm_up().unwrap_err().to_string();
    assert!(err.contains("config.json"), "{err}");
}

fn temp_dir(what: &str) -> testkit::Scratch {
    testkit::Scratch::new(&format!("sut-node-llm-{what}"))
}

/// A tiny random Llama: vocabulary 64, 2 layers, hidden 16, 4 heads of
/// which 2 for keys and values.
const VOCAB: usize = 64;
const HIDDEN: usize = 16;
const FFN: usize = 32;
const LAYERS: usize = 2;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const CONTEXT: usize = 32;
const EOS: u32 = 63;

/// Weights by role: (safetensors name, GGUF name, shape as
/// (out, in)); seeded so that every run builds the same model.
fn tiny_weights(tied: bool) -> Vec<(String, String, Tensor)> {
    let head_dim = HIDDEN / HEADS;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut random = |shape: (usize, usize)| {
        let data: Vec<f32> = (0..shape.0 * shape.1)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.8
            })
            .collect();
        Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
    };
    let ones = || Tensor::ones(HIDDEN, DType::F32, &Device::Cpu).unwrap();
    let mut w = vec![(
        "model.embed_tokens.weight".to_string(),
        "token_embd.weight".to_string(),
        random((VOCAB, HIDDEN)),
    )];
    for l in 0..LAYERS {
        let st = |n: &str| format!("model.layers.{l}.{n}.weight");
        let gg = |n: &str| format!("blk.{l}.{n}.weight");
        for (s, g, shape) in [
            ("self_attn.q_proj", "attn_q", (HIDDEN, HIDDEN)),
            ("self_attn.k_proj", "attn_k", (KV_HEADS * head_dim, HIDDEN)),
            ("self_attn.v_proj", "attn_v", (KV_HEADS * head_dim, HIDDEN)),
            ("self_attn.o_proj", "attn_output", (HIDDEN, HIDDEN)),
            ("mlp.gate_proj", "ffn_gate", (FFN, HIDDEN)),
            ("mlp.up_proj", "ffn_up", (FFN, HIDDEN)),
            ("mlp.down_proj", "ffn_down", (HIDDEN, FFN)),
        ] {
            w.push((st(s), gg(g), random(shape)));
        }
        w.push((st("input_layernorm"), gg("attn_norm"), ones()));
        w.push((st("post_attention_layernorm"), gg("ffn_norm"), ones()));
    }
    w.push((
        "model.norm.weight".to_string(),
        "output_norm.weight".to_string(),
        ones(),
    ));
    if !tied {
        w.push((
            "lm_head.weight".to_string(),
            "output.weight".to_string(),
            random((VOCAB, HIDDEN)),
        ));
    }
    w
}

fn tiny_safetensors(dir: &Path) {
    let config = serde_json::json!({
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "vocab_size": VOCAB,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": CONTEXT,
        "bos_token_id": 1,
        "eos_token_id": EOS,
        "tie_word_embeddings": false,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let tensors: HashMap<String, Tensor> = tiny_weights(false)
        .into_iter()
        .map(|(name, _, t)| (name, t))
        .collect();
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
}

/// The same kind of model as GGUF, with tied embeddings (no
/// output.weight) as in small models.
fn tiny_gguf(path: &Path) {
    use gguf_file::Value;
    let metadata = [
        ("general.architecture", Value::String("llama".into())),
        ("llama.block_count", Value::U32(LAYERS as u32)),
        ("llama.context_length", Value::U32(CONTEXT as u32)),
        ("llama.embedding_length", Value::U32(HIDDEN as u32)),
        ("llama.feed_forward_length", Value::U32(FFN as u32)),
        ("llama.attention.head_count", Value::U32(HEADS as u32)),
        ("llama.attention.head_count_kv", Value::U32(KV_HEADS as u32)),
        (
            "llama.rope.dimension_count",
            Value::U32((HIDDEN / HEADS) as u32),
        ),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(EOS)),
    ];
    let tensors: Vec<(String, QTensor)> = tiny_weights(true)
        .into_iter()
        .map(|(_, name, t)| (name, QTensor::quantize(&t, GgmlDType::F32).unwrap()))
        .collect();
    let metadata: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut file, &metadata, &tensors).unwrap();
}

/// Collects first tokens as the node would send them.
#[derive(Default)]
struct Firsts(Vec<(usize, Bytes)>);

impl SampleSink for Firsts {
    fn first_token(&mut self, index: usize, payload: Bytes) {
        self.0.push((index, payload));
    }
}

fn prompt(ids: &[i32]) -> Bytes {
    Bytes::from(
        ids.iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
}

/// Runs a batch through a tiny model and checks what every LLM answer
/// must satisfy; returns the answers' token ids.
fn check_tiny_model(path: &Path) -> Vec<Result<Vec<u32>, String>> {
    let args = LlmOptions {
        max_new_tokens: 6,
        ..LlmOptions::default()
    };
    let llm = Llm::new(path, args).unwrap();
    llm.warm_up().unwrap();
    let too_long: Vec<i32> = (0..CONTEXT as i32 + 1).map(|i| i % 60).collect();
    let inputs = [
        prompt(&[1, 5, 9, 12]),
        prompt(&[1, 2]),
        prompt(&too_long),
        Bytes::from_static(&[1, 0, 0]),
        prompt(&[1, VOCAB as i32]),
        prompt(&[1, 5, 9, 12]),
    ];
    let mut firsts = Firsts::default();
    let outputs = llm
        .infer(&inputs, BatchInfo::default(), &mut firsts)
        .unwrap();
    assert_eq!(outputs.len(), inputs.len());
    let ids: Vec<Result<Vec<u32>, String>> = outputs
        .iter()
        .map(|o| {
            o.as_ref()
                .map(|a| parse_token_ids(&a.payload, TokenDtype::Int32).unwrap())
                .map_err(ToString::to_string)
        })
        .collect();
    for (i, out) in outputs.iter().enumerate() {
        match out {
            Ok(answer) => {
                let tokens = &ids[i].as_ref().unwrap();
                assert_eq!(answer.n_tokens as usize, tokens.len());
                assert!((1..=6).contains(&tokens.len()), "{tokens:?}");
                // Stops at the end-of-sequence token, if it comes.
                assert!(!tokens[..tokens.len() - 1].contains(&EOS));
                assert!(tokens.iter().all(|&t| (t as usize) < VOCAB));
                let first = firsts.0.iter().find(|(j, _)| *j == i).unwrap();
                assert_eq!(first.1, answer.payload.slice(..4));
            }
            Err(_) => assert!(firsts.0.iter().all(|(j, _)| *j != i)),
        }
    }
    let err = |i: usize| ids[i].clone().unwrap_err();
    assert!(err(2).contains("context"), "{}", err(2));
    assert!(err(3).contains("3 bytes"), "{}", err(3));
    assert!(err(4).contains("vocabulary"), "{}", err(4));
    // Greedy decoding: the same prompt, the same answer, whatever ran
    // between.
    assert_eq!(ids[0], ids[5]);
    ids
}

#[test]
fn runs_a_tiny_safetensors_model() {
    let dir = temp_dir("safetensors");
    tiny_safetensors(&dir);
    check_tiny_model(&dir);
}

#[test]
fn runs_a_tiny_gguf_model_with_tied_embeddings() {
    let dir = temp_dir("gguf");
    let path = dir.join("tiny.gguf");
    tiny_gguf(&path);
    check_tiny_model(&path);
}

#[test]
fn int64_ids_in_and_out_give_the_same_tokens() {
    let dir = temp_dir("int64");
    tiny_safetensors(&dir);
    let ids = [1u32, 5, 9, 12];
    let mut answers = Vec::new();
    for dtype in [TokenDtype::Int32, TokenDtype::Int64] {
        let args = LlmOptions {
            max_new_tokens: 5,
            llm_input_dtype: dtype,
            llm_output_dtype: dtype,
            ..LlmOptions::default()
        };
        let llm = Llm::new(&dir, args).unwrap();
        let mut firsts = Firsts::default();
        let out = llm
            .infer(
                &[encode_token_ids(&ids, dtype)],
                BatchInfo::default(),
                &mut firsts,
            )
            .unwrap();
        let answer = out[0].as_ref().unwrap();
        assert_eq!(firsts.0[0].1.len(), dtype.width());
        answers.push(parse_token_ids(&answer.payload, dtype).unwrap());
    }
    assert_eq!(answers[0], answers[1]);
}

#[test]
fn generation_stops_at_the_end_of_the_context() {
    let dir = temp_dir("context");
    tiny_safetensors(&dir);
    let args = LlmOptions {
        max_new_tokens: 100,
        ..LlmOptions::default()
    };
    let llm = Llm::new(&dir, args).unwrap();
    let mut firsts = Firsts::default();
    let long: Vec<i32> = (0..CONTEXT as i32 - 2).map(|i| i % 60).collect();
    let out = llm
        .infer(&[prompt(&long)], BatchInfo::default(), &mut firsts)
        .unwrap();
    let answer = out[0].as_ref().unwrap();
    // 30 prompt tokens leave room for at most 3 new ones.
    assert!((1..=3).contains(&answer.n_tokens), "{answer:?}");
}
