//! The kernels a decoded token launches, counted by kind (the figure `hearth bench` prints per
//! token) on the 4-bit MLX fixture: Gemma 4 with E2B's structure at a tiny size (6 layers, the
//! last 2 KV-shared, sliding and global layers, per-layer inputs; q, k and v packed into one
//! matrix, as every packed checkpoint loads). Each layer with its own cache writes the token's key
//! and value in its attention's split launch: no cache-write launch is left in a decoded token;
//! and each layer's per-layer-input gate adds the MLP's output to the residual stream itself: no
//! add + norm launch of its own before it.
//!
//! One test in its own binary: the launch observer is process-wide. On the GPU only (a real one,
//! or lavapipe in CI): the CPU backend launches nothing.

use std::collections::BTreeMap;
use std::path::Path;

use burn::tensor::Tensor;
use hearth_kernels::dispatches::count_dispatches;
use hearth_model::model_dir::load_model;
use hearth_model::{CacheOptions, Input, KvCache, Output, gpu};

/// Launches of a decoded token of the fixture, launched one by one (the bench's count).
const LAUNCHES_PER_TOKEN: usize = 62;

fn read(t: Tensor<2>) -> Vec<f32> {
    pollster::block_on(t.into_data_async()).expect("readable logits").try_into_vec().unwrap()
}

/// Kernel kind (the type's last path segment, without generics) → launches.
fn by_kind(counts: &BTreeMap<&'static str, usize>) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for (name, n) in counts {
        let bare = name.split('<').next().unwrap_or(name);
        let kind = bare.rsplit("::").next().unwrap_or(bare).to_string();
        *kinds.entry(kind).or_default() += n;
    }
    kinds
}

#[test]
fn a_decoded_token_writes_its_keys_and_values_in_the_attention_launch() {
    let device = match gpu::init_gpu_blocking() {
        Ok(gpu) => gpu.device,
        Err(err) if std::env::var_os("HEARTH_REQUIRE_GPU").is_none() => {
            eprintln!("no GPU, nothing launches: {err}");
            return;
        }
        Err(err) => panic!("HEARTH_REQUIRE_GPU is set but {err}"),
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join("gemma4-mlx-4bit");
    let model = load_model(&dir, &device).expect("the fixture model loads");
    let c = &model.config;
    let own_caches = c.layers.iter().filter(|layer| layer.kv_producer.is_none()).count();
    assert_eq!((c.num_layers, own_caches), (6, 4), "the fixture's structure");
    // Launched one by one: a replay launches nothing the observer sees.
    model.set_step_recording(false);
    // A ring of window + 4 slots, wrapped by the prompt and the steps.
    let mut cache = KvCache::new(c, CacheOptions { max_context: 64, max_chunk: 4 }, model.device());
    let prompt: Vec<u32> = (0..13).map(|i| 3 + (i * 37) % 120).collect();
    read(model.forward(Input::ids(&prompt), &mut cache, Output::Last).unwrap().logits);
    read(model.forward(Input::ids(&[7]), &mut cache, Output::Last).unwrap().logits);
    let (logits, counts) = count_dispatches(|| model.forward(Input::ids(&[11]), &mut cache, Output::Last));
    read(logits.unwrap().logits);
    let kinds = by_kind(&counts);
    let total: usize = counts.values().sum();
    eprintln!("{total} launches a decoded token:");
    for (kind, n) in &kinds {
        eprintln!("{n:>4} {kind}");
    }
    let launches =
        |part: &str| kinds.iter().filter(|(kind, _)| kind.to_lowercase().contains(part)).map(|(_, n)| n).sum::<usize>();
    assert_eq!(launches("writekeysvalues") + launches("writecache"), 0, "no cache write of its own: {kinds:?}");
    assert_eq!(launches("decodeattentionsplit"), c.num_layers, "one split a layer: {kinds:?}");
    assert_eq!(launches("residualgatedby"), c.num_layers, "the update inside each layer's input gate: {kinds:?}");
    assert_eq!(total, LAUNCHES_PER_TOKEN, "{kinds:?}");
}
