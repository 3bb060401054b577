//! Dequantization against gguf-py: fixtures/quant_types.gguf (written by fixtures/gen_gguf.py)
//! holds one tensor per supported ggml type next to gguf-py's f32 values for it.

use std::path::Path;

use hearth_weights::{Checkpoint, FileSource, GgmlType, GgufFile, MetadataValue};

const TYPES: [(&str, GgmlType); 18] = [
    ("f32", GgmlType::F32),
    ("f16", GgmlType::F16),
    ("bf16", GgmlType::BF16),
    ("f64", GgmlType::F64),
    ("i8", GgmlType::I8),
    ("i16", GgmlType::I16),
    ("i32", GgmlType::I32),
    ("q4_0", GgmlType::Q4_0),
    ("q4_1", GgmlType::Q4_1),
    ("q5_0", GgmlType::Q5_0),
    ("q5_1", GgmlType::Q5_1),
    ("q8_0", GgmlType::Q8_0),
    ("q2_k", GgmlType::Q2K),
    ("q3_k", GgmlType::Q3K),
    ("q4_k", GgmlType::Q4K),
    ("q5_k", GgmlType::Q5K),
    ("q6_k", GgmlType::Q6K),
    ("q8_k", GgmlType::Q8K),
];

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/quant_types.gguf")
}

#[test]
fn every_type_dequantizes_bit_exactly_like_gguf_py() {
    let mut checkpoint = Checkpoint::open(&fixture()).expect("fixture opens");
    let header = checkpoint.gguf().expect("a GGUF checkpoint").clone();
    assert_eq!(header.alignment, 64);
    for (name, ty) in TYPES {
        assert_eq!(header.tensors[name].ggml_type, ty, "{name}");
        let actual = checkpoint.read_f32(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = checkpoint.read_f32(&format!("{name}.expected")).expect("expected values");
        assert_eq!(actual.shape, vec![2, 512], "{name}");
        assert_eq!(actual.shape, expected.shape, "{name}");
        let mismatches = actual.data.iter().zip(&expected.data).filter(|(a, e)| a.to_bits() != e.to_bits()).count();
        assert_eq!(mismatches, 0, "{name}: {mismatches} values differ from gguf-py");
        assert!(actual.data.iter().any(|&v| v != 0.0), "{name}: all zero");
    }
}

#[test]
fn metadata_of_every_value_type() {
    let file = GgufFile::read(&mut FileSource::open(&fixture()).unwrap()).unwrap();
    let get = |key: &str| file.get(key).unwrap_or_else(|| panic!("{key} missing"));
    assert_eq!(file.architecture(), Some("hearth-test"));
    assert_eq!(get("test.u8"), &MetadataValue::U8(200));
    assert_eq!(get("test.i8"), &MetadataValue::I8(-100));
    assert_eq!(get("test.u16"), &MetadataValue::U16(60000));
    assert_eq!(get("test.i16"), &MetadataValue::I16(-30000));
    assert_eq!(get("test.u32"), &MetadataValue::U32(4_000_000_000));
    assert_eq!(get("test.i32"), &MetadataValue::I32(-2_000_000_000));
    assert_eq!(get("test.f32"), &MetadataValue::F32(0.25));
    assert_eq!(get("test.u64"), &MetadataValue::U64((1 << 63) + 5));
    assert_eq!(get("test.i64"), &MetadataValue::I64(-(1 << 62)));
    assert_eq!(get("test.f64"), &MetadataValue::F64(-1.5));
    assert_eq!(get("test.bool"), &MetadataValue::Bool(true));
    assert_eq!(get("test.string").as_str(), Some("héllo ▁world"));
    let strings: Vec<&str> = get("test.strings").as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(strings, ["a", "", "▁b"]);
    assert_eq!(
        get("test.i32s"),
        &MetadataValue::Array(vec![MetadataValue::I32(1), MetadataValue::I32(-2), MetadataValue::I32(3)])
    );
    assert_eq!(get("test.f32s").as_array().unwrap()[1].as_f64(), Some(-1.0));
    assert_eq!(get("test.i8").as_u64(), None);
    assert_eq!(get("test.u16").as_usize(), Some(60000));
}

/// The types with an affine form, repacked, equal gguf-py's values exactly once dequantized (up to
/// the sign of zero).
#[test]
fn repacked_types_equal_gguf_py_bit_for_bit() {
    use hearth_weights::gguf_affine::affine_params;
    let mut checkpoint = Checkpoint::open(&fixture()).expect("fixture opens");
    let mut packed = 0;
    for (name, ty) in TYPES {
        let expected = checkpoint.read_f32(&format!("{name}.expected")).expect("expected values");
        let Some(params) = affine_params(ty) else { continue };
        let tensor = hearth_weights::gguf_affine::to_affine(name, ty, &raw_bytes(&checkpoint, name), 2, 512)
            .expect("valid blocks")
            .expect("repackable");
        assert_eq!(tensor.params, params, "{name}");
        let got = tensor.dequantize().data;
        let differ = got.iter().zip(&expected.data).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "{name}: {differ} values differ from gguf-py");
        packed += 1;
    }
    assert_eq!(packed, 8);
}

fn raw_bytes(checkpoint: &Checkpoint, name: &str) -> Vec<u8> {
    use hearth_weights::ByteSource;
    let tensor = &checkpoint.gguf().expect("GGUF").tensors[name];
    FileSource::open(&fixture()).expect("opens").read_at(tensor.offset, tensor.len).expect("reads")
}
