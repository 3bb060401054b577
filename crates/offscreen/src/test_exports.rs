//! What only test and bench builds export (the `test-exports` feature): the chat reply
//! (`generate`, through the engine's `Engine::reply` as `hearth generate` is; the e2e parity test
//! compares the two) and the browser bench's timing of speculative decoding's verifications.

use std::ops::ControlFlow;

use hearth_engine::{Reply, reports};
use hearth_protocol::{GenerateRequest, GenerationEvent};

use crate::engine_state::{engine, now_ms};

/// Runs one generation and returns its final event (`done` or `failed`); `emit` gets the tokens.
pub async fn generate(request: &GenerateRequest, emit: &impl Fn(&GenerationEvent)) -> GenerationEvent {
    let request_id = request.request_id;
    let Some(engine) = engine() else {
        return GenerationEvent::Failed { request_id, message: "No model is installed yet.".into() };
    };
    let on_token = |token_id, text: &str| {
        emit(&GenerationEvent::Token { request_id, token_id, text: text.into() });
        ControlFlow::Continue(())
    };
    reports::generation_event(request_id, engine.reply(&Reply::from(request), on_token).await)
}

/// One row of [`measure_verification`].
#[derive(serde::Serialize)]
pub struct VerificationCost {
    k: usize,
    verify_ms: f64,
    token_ms: f64,
}

/// The conversation the measurement uses (its cache only).
const BENCH_CONVERSATION: u64 = u64::MAX - 1;

/// Times verifications of k+1 tokens against decoded tokens on the loaded model (see
/// `measureVerification` in lib.rs). Each figure is the median of `repeats`, after a warm-up.
pub async fn measure_verification(ks: &[usize], repeats: usize) -> Result<Vec<VerificationCost>, String> {
    let engine = engine().ok_or("no model is loaded")?;
    let model = engine.model();
    let mut session = model.session.lock().await;
    session.use_conversation(BENCH_CONVERSATION);
    let vocab = session.model().config.vocab_size as u32;
    let token = |i: usize| 2 + (i as u32 * 7919) % (vocab - 2);
    let prompt: Vec<u32> = (0..32).map(token).collect();
    let read = |ids: burn::tensor::Tensor<2, burn::tensor::Int>| async move {
        let data = ids.into_data_async().await.map_err(|e| e.to_string())?;
        Ok::<u32, String>(data.iter::<i64>().next().unwrap_or(0) as u32)
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (logits, _) = session.prefill(&prompt).map_err(|e| e.to_string())?;
    let mut next = read(logits.argmax(1)).await?;
    // Decoded tokens: two to warm up (pipelines, the recorded step), then timed.
    let mut token_times = Vec::new();
    for i in 0..repeats + 2 {
        let start = now_ms();
        let logits = session.step(next).map_err(|e| e.to_string())?;
        next = read(logits.argmax(1)).await?;
        if i >= 2 {
            token_times.push(now_ms() - start);
        }
    }
    let token_ms = median(token_times);
    let mut rows = Vec::new();
    for &k in ks {
        if k + 1 > session.max_verify() {
            return Err(format!("a verification of {} tokens does not fit the cache's chunk", k + 1));
        }
        let held = session.tokens().len();
        let chunk: Vec<u32> = (0..=k).map(|i| token(held + i)).collect();
        let mut times = Vec::new();
        for i in 0..repeats + 1 {
            let start = now_ms();
            let (logits, _) = session.verify(&chunk).map_err(|e| e.to_string())?;
            read(logits.argmax(1)).await?;
            session.truncate(held).map_err(|e| e.to_string())?;
            if i >= 1 {
                times.push(now_ms() - start);
            }
        }
        rows.push(VerificationCost { k, verify_ms: median(times), token_ms });
    }
    Ok(rows)
}
