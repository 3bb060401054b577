//! MLX affine quantization read back exactly as MLX dequantizes it, at every bit width MLX has.
//! Fixture: `fixtures/mlx_affine.safetensors`, written by `fixtures/gen_mlx.py` (real `mlx.core`).

use std::path::Path;

use hearth_weights::{Checkpoint, Quantization};

fn fixture() -> Checkpoint {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mlx_affine.safetensors");
    Checkpoint::open(&path).expect("the fixture opens")
}

/// The config mlx-lm would write for these modules: one default plus an override per module.
fn quantization(modules: &[String]) -> Quantization {
    let mut entries = vec![r#""group_size": 64, "bits": 4, "mode": "affine""#.to_string()];
    for m in modules {
        let (bits, rest) = m.trim_start_matches('b').split_once("_g").unwrap();
        let group = rest.trim_end_matches("_wide");
        entries.push(format!(r#""{m}": {{"group_size": {group}, "bits": {bits}}}"#));
    }
    Quantization::from_config_json(&format!(r#"{{"quantization": {{{}}}}}"#, entries.join(","))).unwrap().unwrap()
}

#[test]
fn every_bit_width_dequantizes_exactly_as_mlx_does() {
    let mut checkpoint = fixture();
    let modules: Vec<String> =
        checkpoint.names().filter_map(|n| n.strip_suffix(".scales")).map(str::to_string).collect();
    assert_eq!(modules.len(), 19);
    checkpoint.set_quantization(Some(quantization(&modules)));
    for module in &modules {
        let expected = checkpoint.read_f32(&format!("{module}.expected")).unwrap();
        let packed = checkpoint.read_affine(module).unwrap().expect("quantized");
        assert_eq!(vec![packed.rows, packed.cols], expected.shape, "{module}");
        // read_f32 on a quantized weight dequantizes it.
        let got = checkpoint.read_f32(&format!("{module}.weight")).unwrap();
        assert_eq!(got, expected, "{module}");
    }
}

#[test]
fn a_wrong_group_size_in_the_config_is_caught() {
    let mut checkpoint = fixture();
    checkpoint.set_quantization(Some(quantization(&["b4_g128".to_string()])));
    // b4_g32 falls back to the default group of 64, which its scales contradict.
    let err = checkpoint.read_affine("b4_g32").unwrap_err().to_string();
    assert!(err.contains("b4_g32") && err.contains("groups of 64"), "{err}");
}

#[test]
fn scales_without_a_quantization_config_are_an_error() {
    let mut checkpoint = fixture();
    let err = checkpoint.read_f32("b4_g64.weight").unwrap_err().to_string();
    assert!(err.contains("declares no `quantization`"), "{err}");
}

#[test]
fn row_slices_equal_the_rows_of_the_whole() {
    let mut checkpoint = fixture();
    checkpoint.set_quantization(Some(quantization(&["b4_g64_wide".to_string()])));
    let whole = checkpoint.read_affine("b4_g64_wide").unwrap().unwrap().dequantize();
    let part = checkpoint.read_affine_rows("b4_g64_wide", Some(1..4)).unwrap().unwrap().dequantize();
    assert_eq!(part.shape, vec![3, 256]);
    assert_eq!(part.data, whole.data[256..4 * 256]);
    assert!(checkpoint.read_affine_rows("b4_g64_wide", Some(4..6)).is_err());
}
