//! The `hearth` command as a user runs it: parity of `logits` with transformers, `render` with
//! jinja2, `generate` with transformers' greedy ids, `parse`, and clear errors on bad input.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn hearth(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hearth runs");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
    child.wait_with_output().expect("hearth finishes")
}

fn json(path: PathBuf) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture parses")
}

fn max_diff(actual: &serde_json::Value, expected: &serde_json::Value) -> f64 {
    let rows = |v: &serde_json::Value| -> Vec<Vec<f64>> {
        v.as_array()
            .expect("rows")
            .iter()
            .map(|r| r.as_array().expect("row").iter().map(|x| x.as_f64().expect("number")).collect())
            .collect()
    };
    let (a, e) = (rows(actual), rows(expected));
    assert_eq!(a.len(), e.len());
    a.iter().zip(&e).flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs())).fold(0.0, f64::max)
}

#[test]
fn logits_match_transformers_full_and_step_by_step() {
    let dir = repo().join("crates/model/fixtures/gemma4-text");
    let expected = json(dir.join("expected.json"));
    let tokens: Vec<String> = expected["tokens"].as_array().expect("tokens").iter().map(|t| t.to_string()).collect();
    let tokens = tokens.join(",");
    // On the GPU (lavapipe in CI) the steps after the first replay a recording: the command keeps
    // every step's logits to the end, which must not read the last step's values.
    for extra in [&["--cpu"][..], &["--cpu", "--step-by-step"][..], &["--step-by-step"][..]] {
        let mut args = vec!["logits", "--model", dir.to_str().expect("utf-8 path"), "--tokens", &tokens];
        args.extend(extra);
        let out = hearth(&args, "");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let printed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        let diff = max_diff(&printed["logits"], &expected["logits"]);
        assert!(diff <= 1e-3, "{extra:?}: max |Δlogit| {diff}");
    }
}

#[test]
fn render_is_byte_exact_with_jinja2() {
    let fixtures = repo().join("crates/chat/fixtures");
    let template = fixtures.join("gemma4-e2b-chat-template.jinja");
    let cases = json(fixtures.join("conversations.json"));
    for case in cases.as_array().expect("cases") {
        let out = hearth(&["render", "--template", template.to_str().expect("utf-8 path")], &case.to_string());
        assert!(out.status.success(), "{}: {}", case["name"], String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            case["expected"].as_str().expect("expected"),
            "{}",
            case["name"]
        );
    }
}

#[test]
fn generate_streams_transformers_greedy_tokens() {
    let dir = repo().join("crates/model/fixtures/tiny-chat");
    let expected = json(dir.join("expected.json"));
    let args = [
        "generate",
        "--model",
        dir.to_str().expect("utf-8 path"),
        "--chat",
        "--max-tokens",
        "24",
        "--print-ids",
        "--cpu",
    ];
    let mut args = args.to_vec();
    args.extend(["--prompt", "Say hello to the lantern shop."]);
    let out = hearth(&args, "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(printed_ids(&stderr), expected_greedy(&expected));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        expected["greedy_text"].as_str().expect("text").trim_end()
    );
    assert!(stderr.contains("tokens/s"), "speed is reported: {stderr}");
}

#[test]
fn generate_reads_a_gguf_file_with_its_own_tokenizer() {
    for case in ["gemma3-gguf", "gemma4-gguf"] {
        let dir = repo().join("crates/model/fixtures").join(case);
        let expected = json(dir.join("expected.json"));
        let model = dir.join("model.gguf");
        let prompt = expected["tokenizer"][0]["text"].as_str().expect("prompt");
        let args =
            ["generate", "--model", model.to_str().expect("utf-8 path"), "--max-tokens", "8", "--print-ids", "--cpu"];
        let mut args = args.to_vec();
        args.push(prompt);
        let out = hearth(&args, "");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{case}: {stderr}");
        assert_eq!(printed_ids(&stderr), expected_greedy(&expected), "{case}");
        assert!(stderr.contains("loaded in"), "{case}: load time is reported: {stderr}");
    }
}

#[test]
fn parse_prints_content_thinking_and_calls() {
    let raw = "<|channel>thought\nFill the name first.<channel|>On it.<|tool_call>call:type{index:3,text:<|\"|>Ada \"the\" Lovelace<|\"|>}<tool_call|>";
    let out = hearth(&["parse"], raw);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let parsed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(parsed["thinking"], "Fill the name first.");
    assert_eq!(parsed["content"], "On it.");
    assert_eq!(parsed["tool_calls"][0]["name"], "type");
    assert_eq!(parsed["tool_calls"][0]["arguments"], serde_json::json!({"index": 3, "text": "Ada \"the\" Lovelace"}));
}

#[test]
fn bad_input_gets_a_clear_error_not_a_panic() {
    let out = hearth(&["logits", "--model", "/nonexistent/model", "--tokens", "2,3", "--cpu"], "");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/model") && !stderr.contains("panicked"), "{stderr}");

    let template = repo().join("crates/chat/fixtures/gemma4-e2b-chat-template.jinja");
    let out = hearth(&["render", "--template", template.to_str().expect("utf-8 path")], "{not json");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a valid conversation"));

    let dir = repo().join("crates/model/fixtures/gemma4-text");
    let out = hearth(&["logits", "--model", dir.to_str().expect("utf-8 path"), "--tokens", "2,999999", "--cpu"], "");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("outside the vocabulary"));
}

/// The ids `generate --print-ids` wrote to stderr.
fn printed_ids(stderr: &str) -> Vec<u64> {
    let ids = stderr.lines().find_map(|l| l.strip_prefix("hearth: token ids ")).expect("ids printed");
    serde_json::from_str(ids).expect("ids parse")
}

/// A fixture's `greedy` ids.
fn expected_greedy(expected: &serde_json::Value) -> Vec<u64> {
    expected["greedy"].as_array().expect("greedy").iter().filter_map(|v| v.as_u64()).collect()
}

/// A PNG of `width` × `height` with a gradient, written to the temp folder.
fn write_png(name: &str, width: u32, height: u32) -> PathBuf {
    let path = std::env::temp_dir().join(format!("hearth-{}-{name}.png", std::process::id()));
    let file = std::fs::File::create(&path).expect("temp file");
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let pixels: Vec<u8> = (0..height)
        .flat_map(|y| {
            (0..width).flat_map(move |x| [(x * 255 / width) as u8, (y * 255 / height) as u8, ((x + y) % 256) as u8])
        })
        .collect();
    encoder.write_header().and_then(|mut w| w.write_image_data(&pixels)).expect("png written");
    path
}

/// `--image`: the test model's vision tower sees a PNG; its soft tokens change the answer.
#[test]
fn generate_looks_at_an_image() {
    let dir = repo().join("crates/model/fixtures/tiny-chat");
    let model = dir.to_str().expect("utf-8 path");
    let image = write_png("picture", 64, 40);
    let ask = |image: Option<&Path>| {
        let mut args = vec!["generate", "--model", model, "--chat", "--max-tokens", "8", "--print-ids", "--cpu"];
        if let Some(image) = image {
            args.extend(["--image", image.to_str().expect("utf-8 path"), "--image-budget", "70"]);
        }
        args.extend(["--prompt", "What is in the picture?"]);
        let out = hearth(&args, "");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        stderr
    };
    let seeing = ask(Some(&image));
    assert!(seeing.contains("1 image(s) encoded to "), "{seeing}");
    let blind = ask(None);
    assert_ne!(printed_ids(&seeing), printed_ids(&blind), "the image changes the answer");

    let not_png = std::env::temp_dir().join(format!("hearth-{}-not.png", std::process::id()));
    std::fs::write(&not_png, "hello").expect("temp file");
    let args = [
        "generate",
        "--model",
        model,
        "--chat",
        "--image",
        not_png.to_str().expect("utf-8"),
        "--cpu",
        "--prompt",
        "Hi",
    ];
    let out = hearth(&args, "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("not a PNG image"), "{stderr}");
    let args = ["generate", "--model", model, "--chat", "--image", "x.png", "--image-budget", "100", "--prompt", "Hi"];
    let stderr = String::from_utf8_lossy(&hearth(&args, "").stderr).into_owned();
    assert!(stderr.contains("70, 140, 280, 560, 1120"), "{stderr}");
    let _ = std::fs::remove_file(image);
    let _ = std::fs::remove_file(not_png);
}

/// A WAV file of `seconds` of a tone at `rate` Hz, written to the temp folder.
pub(crate) fn write_wav(name: &str, rate: u32, seconds: f32) -> PathBuf {
    let path = std::env::temp_dir().join(format!("hearth-{}-{name}.wav", std::process::id()));
    let spec =
        hound::WavSpec { channels: 1, sample_rate: rate, bits_per_sample: 16, sample_format: hound::SampleFormat::Int };
    let mut writer = hound::WavWriter::create(&path, spec).expect("temp file");
    for i in 0..(rate as f32 * seconds) as usize {
        let value = (i as f32 * 440.0 * std::f32::consts::TAU / rate as f32).sin() * 0.3;
        writer.write_sample((value * i16::MAX as f32) as i16).expect("sample written");
    }
    writer.finalize().expect("wav written");
    path
}

/// `--audio`: the tiny model hears a clip (its soft tokens reported); a clip at another rate and a
/// model without an audio tower are refused in words (the tower's numbers are
/// `crates/model/tests/audio_parity.rs`'s).
#[test]
fn generate_hears_a_clip_and_refuses_one_it_cannot_hear() {
    let ask = |model: &Path, clip: &Path| {
        let args = [
            "generate",
            "--model",
            model.to_str().expect("utf-8 path"),
            "--chat",
            "--audio",
            clip.to_str().expect("utf-8 path"),
            "--cpu",
            "--max-tokens",
            "4",
            "--prompt",
            "What did I say?",
        ];
        hearth(&args, "")
    };
    let hearing = repo().join("crates/model/fixtures/tiny-chat");
    let speech_rate = write_wav("speech-rate", 16_000, 0.5);
    let out = ask(&hearing, &speech_rate);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    // 0.5 s: 13 soft tokens, as transformers counts them (fixtures/gemma4-audio clip0).
    assert!(stderr.contains("0.50 s of sound encoded to 13 soft tokens"), "{stderr}");

    let refused = |model: &Path, clip: &Path| {
        let out = ask(model, clip);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let cd_rate = write_wav("cd-rate", 44_100, 0.2);
    let stderr = refused(&hearing, &cd_rate);
    assert!(stderr.contains("44100 Hz") && stderr.contains("16 kHz") && stderr.contains("ffmpeg"), "{stderr}");
    let deaf = repo().join("crates/model/fixtures/gemma4-gguf/model.gguf");
    let stderr = refused(&deaf, &speech_rate);
    assert!(stderr.contains("has no audio tower") && stderr.contains("--mmproj"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let _ = std::fs::remove_file(cd_rate);
    let _ = std::fs::remove_file(speech_rate);
}

/// `hearth generate --drafter`: Gemma 4's assistant drafts (the tiny pair of
/// crates/model/fixtures), the ids are those of the run without it, and the drafting is reported;
/// an assistant made for another model is refused by name.
#[test]
fn generate_with_the_drafter_writes_the_same_ids() {
    let fixtures = repo().join("crates/model/fixtures");
    let main = fixtures.join("gemma4-text");
    let tokenizer = fixtures.join("tiny-chat/tokenizer.json");
    let drafter = fixtures.join("gemma4-drafter/tied");
    let base = [
        "generate",
        "--model",
        main.to_str().expect("utf-8"),
        "--tokenizer",
        tokenizer.to_str().expect("utf-8"),
        "--max-tokens",
        "24",
        "--print-ids",
        "--cpu",
        // Characters the 128-token model has (`!`…`4`).
        "(1+2)*3-4.",
    ];
    let ids = |out: &Output| {
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        let line = stderr.lines().find(|l| l.starts_with("hearth: token ids")).expect("ids printed").to_string();
        (line, stderr)
    };
    let (plain, _) = ids(&hearth(&base, ""));
    let mut with_drafter = base.to_vec();
    with_drafter.extend(["--drafter", drafter.to_str().expect("utf-8"), "--draft", "3"]);
    let (drafted, stderr) = ids(&hearth(&with_drafter, ""));
    assert_eq!(drafted, plain);
    assert!(stderr.contains("hearth: drafted "), "{stderr}");

    // The tiny-chat model has another vocabulary (384 tokens, not 128).
    let other = fixtures.join("tiny-chat");
    let out = hearth(
        &[
            "generate",
            "--model",
            other.to_str().expect("utf-8"),
            "--drafter",
            drafter.to_str().expect("utf-8"),
            "--cpu",
            "hi",
        ],
        "",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("use the assistant published with the model"), "{stderr}");
}
