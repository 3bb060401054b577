//! The model crate's typed results as the protocol's messages: the adapter and the self-test as
//! the extension shows them, and a GPU failure by its locale key (its English text, from the
//! extension's English locale, is what the command line prints).

use hearth_model::decode::Generation;
use hearth_model::gpu::{AdapterInfo, GpuError};
use hearth_model::self_test::SelfTestResult;
use hearth_protocol::{AdapterReport, EngineFailure, FailureKind, GenerationEvent, GenerationStats, SelfTestReport};

/// A chat reply's end as the protocol's last event: `done` with its numbers, or `failed`.
pub fn generation_event(request_id: u32, result: Result<Generation, String>) -> GenerationEvent {
    match result {
        Ok(generation) => GenerationEvent::Done {
            request_id,
            stats: GenerationStats {
                prompt_tokens: generation.prompt_tokens as u32,
                generated_tokens: generation.token_ids.len() as u32,
                prefill_tokens_per_s: generation.prefill_tokens_per_s(),
                decode_tokens_per_s: generation.decode_tokens_per_s(),
                decode_host_ms_per_token: generation.decode_host_ms_per_token(),
                first_decode_host_ms: generation.first_decode_host_ms(),
                drafted_tokens: generation.speculation.as_ref().map_or(0, |s| s.drafted as u32),
                accepted_tokens: generation.speculation.as_ref().map_or(0, |s| s.accepted as u32),
            },
            token_ids: generation.token_ids,
            text: generation.text,
        },
        Err(message) => GenerationEvent::Failed { request_id, message },
    }
}

/// The failure as the overlay shows it, with the action that fixes it.
pub fn gpu_failure(err: &GpuError) -> EngineFailure {
    match err {
        GpuError::NoAdapter(detail) => {
            EngineFailure::localized(FailureKind::WebgpuUnavailable, "failureNoAdapter", vec![detail.clone()])
        }
        GpuError::Device(detail) => {
            EngineFailure::localized(FailureKind::GpuDevice, "failureGpuRefused", vec![detail.clone()])
        }
    }
}

/// The adapter as the engine reports it.
pub fn adapter_report(adapter: AdapterInfo) -> AdapterReport {
    let AdapterInfo {
        name,
        vendor,
        architecture,
        backend,
        device_type,
        shader_f16,
        max_buffer_size,
        max_storage_buffer_binding_size,
        max_compute_workgroup_storage_size,
    } = adapter;
    AdapterReport {
        name,
        vendor,
        architecture,
        backend,
        device_type,
        shader_f16,
        max_buffer_size,
        max_storage_buffer_binding_size,
        max_compute_workgroup_storage_size,
    }
}

/// The self-test's result as the engine reports it.
pub fn self_test_report(result: SelfTestResult) -> SelfTestReport {
    let SelfTestResult {
        computation,
        passed,
        values,
        max_abs_error,
        tolerance,
        elapsed_ms,
        fused_kernels_max_abs_error,
    } = result;
    SelfTestReport { computation, passed, values, max_abs_error, tolerance, elapsed_ms, fused_kernels_max_abs_error }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_failures_keep_their_text_and_locale_keys() {
        let failure = gpu_failure(&GpuError::NoAdapter("none".into()));
        assert_eq!(failure.kind, FailureKind::WebgpuUnavailable);
        assert_eq!(failure.message, "No WebGPU adapter is available: none");
        assert!(failure.fix.starts_with("Hearth needs WebGPU. Use Chrome or Chromium 124 or newer"), "{failure:?}");
        let text = failure.text.expect("localized");
        assert_eq!((text.key.as_str(), text.args), ("failureNoAdapter", vec!["none".to_string()]));

        let failure = gpu_failure(&GpuError::Device("lost".into()));
        assert_eq!(failure.kind, FailureKind::GpuDevice);
        assert_eq!(failure.message, "The GPU refused to create a device: lost");
        let text = failure.text.expect("localized");
        assert_eq!((text.key.as_str(), text.args), ("failureGpuRefused", vec!["lost".to_string()]));
    }
}
