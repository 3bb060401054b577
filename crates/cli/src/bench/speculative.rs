//! `hearth bench --speculative 2,4,8`: what speculative decoding costs on the model's shape. A
//! drafter with the assistant's published shape as far as it is known (4 layers, width 256,
//! E2B/E4B's attention; 2,048 centroids, top 32) and random bf16 weights is built in memory and
//! loaded through the real loader. With random weights, acceptance says nothing; the costs do:
//! one verification of k drafts against one decoded token, k draft steps, and whole generations
//! with every draft accepted (a lookup that knows the answer: the ceiling for this k, without the
//! assistant's cost) and with the random assistant (almost every draft rejected: the floor).

use std::ops::ControlFlow;
use std::time::Instant;

use burn::tensor::{Device, Int, Tensor};
use hearth_model::drafter::{Drafter, DrafterConfig};
use hearth_model::generate::{GenerateOptions, Generation, generate};
use hearth_model::speculative::{DraftLength, DraftSource, Speculation};
use hearth_model::tokenizer::Tokenizer;
use hearth_model::{CacheOptions, Gemma, Sampler, SamplingOptions, Session};
use hearth_weights::{Checkpoint, MemorySource};
use serde_json::json;

use super::{SafetensorsWriter, XorShift, sync};

/// Timed repetitions of a verification or a draft (the median is printed).
const REPEATS: usize = 5;

pub(super) fn run(
    device: &Device,
    model: Gemma,
    cache: CacheOptions,
    ks: &[usize],
    tokens: usize,
) -> Result<Gemma, String> {
    let max_k = ks.iter().copied().max().unwrap_or(0);
    println!("## Speculative decoding (random weights: the costs, not the acceptance)\n");
    let drafter = match assistant(&model, device) {
        Ok(drafter) => drafter,
        Err(err) => {
            println!("Skipped: {err}.\n");
            return Ok(model);
        }
    };
    let tokenizer = word_tokenizer(model.config.vocab_size)?;
    let mut session = Session::new(model, cache);
    if tokens <= max_k {
        return Err(format!("--speculative-tokens {tokens}: a verification of {max_k} drafts needs more"));
    }
    if max_k + 1 > session.max_verify() {
        return Err(format!(
            "--speculative {max_k}: a verification of {} tokens does not fit the cache's chunk",
            max_k + 1
        ));
    }
    let prompt: Vec<u32> = (0..64).map(|i| 1000 + (i as u32 * 7919) % 200_000).collect();

    // The answer without drafting, warm (pipelines compiled, the step recorded).
    generate_with(&mut session, &tokenizer, &prompt, 4, None)?;
    let plain = generate_with(&mut session, &tokenizer, &prompt, tokens, None)?;
    let answer = plain.token_ids.clone();
    let plain_s = 1.0 / plain.decode_tokens_per_s();

    println!(
        "| k | verify k+1 tokens, ms | ÷ one decoded token | k draft steps (chained, one readback; recorded), ms | the same launched one by one, ms | the same, each id read back, ms | tokens/s, every draft accepted | tokens/s, random assistant (accepted) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut costs = Vec::new();
    for &k in ks {
        // A verification of k+1 tokens after the prompt, rewound, as a round does.
        let (_, hidden, _) = session.prefill_hidden(&prompt, &Default::default()).map_err(|e| e.to_string())?;
        let p = session.tokens().len();
        let chunk = &answer[..k + 1];
        let verify_s = median((0..REPEATS).map(|_| {
            let start = Instant::now();
            let (logits, _) = session.verify(chunk).map_err(|e| e.to_string())?;
            read_ids(logits.argmax(1))?;
            session.truncate(p).map_err(|e| e.to_string())?;
            Ok(start.elapsed().as_secs_f64())
        }))?;
        // k draft steps from the prompt's end as a round drafts while no call is open: chained on
        // the device, the k ids read back once (each read back before the next step where the
        // model looks its ids up on the host); recorded and replayed (the default), then
        // launched one by one.
        let chain = || {
            median((0..REPEATS).map(|_| {
                let start = Instant::now();
                let context = drafter.context(session.cache()).map_err(|e| e.to_string())?;
                let model = session.model();
                let mut state = hidden.clone();
                let mut choices: Vec<Tensor<2, Int>> = Vec::with_capacity(k);
                let mut token = answer[0];
                for _ in 0..k {
                    let draft = match choices.last() {
                        Some(last) if model.steps_on_device() => drafter.step_chosen(model, &context, last, state),
                        _ => drafter.step(model, &context, token, state),
                    }
                    .map_err(|e| e.to_string())?;
                    let choice = draft.logits.argmax(1);
                    if !model.steps_on_device() {
                        token = read_ids(choice.clone())?[0] as u32;
                    }
                    choices.push(choice);
                    state = draft.state;
                }
                read_ids(Tensor::cat(choices, 0))?;
                Ok(start.elapsed().as_secs_f64())
            }))
        };
        let draft_s = chain()?;
        drafter.set_step_recording(false);
        let draft_launched_s = chain();
        drafter.set_step_recording(true);
        let draft_launched_s = draft_launched_s?;
        // The same steps with each id read back before the next (inside an open call).
        let draft_read_s = median((0..REPEATS).map(|_| {
            let start = Instant::now();
            let context = drafter.context(session.cache()).map_err(|e| e.to_string())?;
            let (mut token, mut state) = (answer[0], hidden.clone());
            for _ in 0..k {
                let draft = drafter.step(session.model(), &context, token, state).map_err(|e| e.to_string())?;
                token = read_ids(draft.logits.argmax(1))?[0] as u32;
                state = draft.state;
            }
            Ok(start.elapsed().as_secs_f64())
        }))?;
        let mut guess = |so_far: &[u32], n: usize| -> Vec<u32> {
            answer.iter().skip(so_far.len() - prompt.len()).take(n).copied().collect()
        };
        // Once untimed: a verification of k+1 tokens is a new chunk shape (its kernels' pipelines).
        let mut warm_up = Speculation::new(DraftSource::Lookup(&mut guess), k);
        warm_up.length = DraftLength::fixed(k);
        generate_with(&mut session, &tokenizer, &prompt, k + 2, Some(&mut warm_up))?;
        let mut lookup = Speculation::new(DraftSource::Lookup(&mut guess), k);
        lookup.length = DraftLength::fixed(k);
        let ceiling = generate_with(&mut session, &tokenizer, &prompt, tokens, Some(&mut lookup))?;
        if ceiling.token_ids != answer {
            return Err(format!("k = {k}: drafting changed the greedy answer"));
        }
        let mut assisted = Speculation::new(DraftSource::Assistant(&drafter), k);
        assisted.length = DraftLength::fixed(k);
        let floor = generate_with(&mut session, &tokenizer, &prompt, tokens, Some(&mut assisted))?;
        let floor_stats = floor.speculation.clone().unwrap_or_default();
        println!(
            "| {k} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} ({:.0} %) |",
            verify_s * 1e3,
            verify_s / plain_s,
            draft_s * 1e3,
            draft_launched_s * 1e3,
            draft_read_s * 1e3,
            ceiling.decode_tokens_per_s(),
            floor.decode_tokens_per_s(),
            floor_stats.acceptance() * 100.0
        );
        costs.push((k, verify_s, draft_s));
    }
    println!(
        "\nWithout drafting: {:.2} tokens/s ({:.2} ms a decoded token, its 4-byte readback included); {tokens} tokens \
         after a 64-token prompt, greedy.\n",
        1.0 / plain_s,
        plain_s * 1e3
    );
    // What a real drafter's acceptance would give, from these costs: a round of k drafts accepted
    // independently with probability α yields (1 − α^(k+1)) / (1 − α) tokens.
    println!(
        "Estimated speed-up over plain decoding at acceptance α, from the measured costs (a round = k draft steps + one verification):\n"
    );
    println!("| k | α = 0.5 | α = 0.7 | α = 0.8 |");
    println!("|---|---|---|---|");
    for (k, verify_s, draft_s) in costs {
        let speedup = |alpha: f64| {
            let tokens = (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha);
            tokens * plain_s / (verify_s + draft_s)
        };
        println!("| {k} | {:.2}× | {:.2}× | {:.2}× |", speedup(0.5), speedup(0.7), speedup(0.8));
    }
    println!();
    Ok(session.into_model())
}

fn generate_with(
    session: &mut Session,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    max_tokens: usize,
    speculation: Option<&mut Speculation<'_>>,
) -> Result<Generation, String> {
    let mut sampler = Sampler::new(SamplingOptions::greedy());
    let clock = Instant::now();
    let options = GenerateOptions { max_tokens, stop_tokens: &[], tool_calls: None, media: None, speculation };
    pollster::block_on(generate(
        session,
        &mut sampler,
        tokenizer,
        prompt,
        options,
        || clock.elapsed().as_secs_f64() * 1e3,
        |_, _| ControlFlow::Continue(()),
    ))
    .map_err(|e| e.to_string())
}

fn read_ids(ids: Tensor<2, Int>) -> Result<Vec<i64>, String> {
    let data = pollster::block_on(ids.into_data_async()).map_err(|e| e.to_string())?;
    Ok(data.iter::<i64>().collect())
}

fn median(runs: impl Iterator<Item = Result<f64, String>>) -> Result<f64, String> {
    let mut values = runs.collect::<Result<Vec<_>, _>>()?;
    values.sort_by(f64::total_cmp);
    Ok(values[values.len() / 2])
}

/// A word-level tokenizer that spells every id (`t<id>`): the benchmark's text.
fn word_tokenizer(vocab: usize) -> Result<Tokenizer, String> {
    let words: serde_json::Map<String, serde_json::Value> = (0..vocab).map(|i| (format!("t{i}"), json!(i))).collect();
    let json = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "t0"}
    });
    Tokenizer::from_bytes(json.to_string().as_bytes()).map_err(|e| e.to_string())
}

/// A drafter for `main` with random bf16 weights, loaded as a downloaded one is.
fn assistant(main: &Gemma, device: &Device) -> Result<Drafter, String> {
    let c = &main.config;
    let (sliding, full) = (
        c.layers.iter().rev().find(|l| l.kind == hearth_model::config::LayerType::Sliding && l.kv_producer.is_none()),
        c.layers.iter().rev().find(|l| l.kind == hearth_model::config::LayerType::Full && l.kv_producer.is_none()),
    );
    let (Some(sliding), Some(full)) = (sliding, full) else {
        return Err(
            "the drafter reads the main model's last full-attention layer; this cut model has none (use all layers)"
                .into(),
        );
    };
    let (width, heads, inter, centroids, top) = (256, 4, 2048, 2048, 32);
    let config = json!({
        "model_type": "gemma4_assistant", "architectures": ["Gemma4AssistantForCausalLM"],
        "backbone_hidden_size": c.hidden_size, "use_ordered_embeddings": true,
        "num_centroids": centroids, "centroid_intermediate_top_k": top, "tie_word_embeddings": true,
        "text_config": {
            "model_type": "gemma4_text", "hidden_size": width, "num_hidden_layers": 4, "intermediate_size": inter,
            "num_attention_heads": heads, "num_key_value_heads": sliding.num_kv_heads, "head_dim": sliding.head_dim,
            "global_head_dim": full.head_dim,
            "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
            "sliding_window": c.sliding_window, "num_kv_shared_layers": 4, "use_double_wide_mlp": false,
            "hidden_size_per_layer_input": 0, "vocab_size": c.vocab_size, "vocab_size_per_layer_input": 0,
            "max_position_embeddings": 131_072, "final_logit_softcapping": null, "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true,
            "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0,
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}
            }
        }
    });
    let config = DrafterConfig::from_json(&config.to_string()).map_err(|e| e.to_string())?;
    let build = Instant::now();
    let mut file = SafetensorsWriter::default();
    let mut rng = XorShift::default();
    let mut random = |file: &mut SafetensorsWriter, name: &str, shape: &[usize]| {
        let n: usize = shape.iter().product();
        let values = (0..n).flat_map(|_| {
            let v = ((rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.04;
            ((v.to_bits() >> 16) as u16).to_le_bytes()
        });
        file.tensor(name, "BF16", shape, values.collect::<Vec<u8>>());
    };
    let text = &config.text;
    random(&mut file, "model.embed_tokens.weight", &[c.vocab_size, width]);
    random(&mut file, "pre_projection.weight", &[width, 2 * c.hidden_size]);
    random(&mut file, "post_projection.weight", &[c.hidden_size, width]);
    random(&mut file, "masked_embedding.centroids.weight", &[centroids, width]);
    let ordering: Vec<u8> = (0..c.vocab_size as i64).flat_map(i64::to_le_bytes).collect();
    file.tensor("masked_embedding.token_ordering", "I64", &[c.vocab_size], ordering);
    file.ones("model.norm.weight", width);
    for (i, layer) in text.layers.iter().enumerate() {
        let name = |part: &str| format!("model.layers.{i}.{part}");
        let q = text.num_heads * layer.head_dim;
        random(&mut file, &name("self_attn.q_proj.weight"), &[q, width]);
        random(&mut file, &name("self_attn.o_proj.weight"), &[width, q]);
        file.ones(&name("self_attn.q_norm.weight"), layer.head_dim);
        random(&mut file, &name("mlp.gate_proj.weight"), &[layer.intermediate_size, width]);
        random(&mut file, &name("mlp.up_proj.weight"), &[layer.intermediate_size, width]);
        random(&mut file, &name("mlp.down_proj.weight"), &[width, layer.intermediate_size]);
        for norm in
            ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
        {
            file.ones(&name(&format!("{norm}.weight")), width);
        }
        file.ones(&name("layer_scalar"), 1);
    }
    let bytes = file.finish();
    let size = bytes.len();
    let mut checkpoint = Checkpoint::from_sources(vec![Box::new(MemorySource::new("assistant.safetensors", bytes))])
        .map_err(|e| e.to_string())?;
    let drafter = Drafter::load(config, c, &mut checkpoint, device).map_err(|e| e.to_string())?;
    sync(device);
    println!(
        "Drafter: 4 layers of width 256, {heads} query heads, MLP {inter}, centroid head ({centroids} centroids, top {top}); \
         random bf16 weights, {:.0} MB as a file, built and loaded in {:.1} s.\n",
        size as f64 / 1e6,
        build.elapsed().as_secs_f64()
    );
    Ok(drafter)
}
