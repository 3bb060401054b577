//! The extension's English locale (`extension/static/_locales/en/messages.json`), compiled in: the
//! one source of the English texts that the engine's failures carry and the command line prints.
//! Other languages are the service worker's (chrome.i18n), from the same keys.

use std::sync::OnceLock;

use serde_json::Value;

const EN: &str = include_str!("../../../extension/static/_locales/en/messages.json");

fn messages() -> &'static Value {
    static MESSAGES: OnceLock<Value> = OnceLock::new();
    // The file is the extension's own, checked by its tests: it parses.
    MESSAGES.get_or_init(|| serde_json::from_str(EN).unwrap_or(Value::Null))
}

/// `key`'s English text with `args` in its placeholders, as `chrome.i18n.getMessage` fills them
/// (a placeholder `$NAME$` whose content is `$n` takes `args[n - 1]`; names match in any case).
/// A key the locale lacks comes back as itself (the crates' keys are checked against the file).
pub fn text(key: &str, args: &[String]) -> String {
    let Some(entry) = messages().get(key) else { return key.to_owned() };
    let mut message = entry.get("message").and_then(Value::as_str).unwrap_or(key).to_owned();
    if let Some(Value::Object(placeholders)) = entry.get("placeholders") {
        for (name, placeholder) in placeholders {
            let content = placeholder.get("content").and_then(Value::as_str).unwrap_or_default();
            let value = content
                .strip_prefix('$')
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| args.get(n.checked_sub(1)?))
                .map_or(content, String::as_str);
            message = replace_ignoring_case(&message, &format!("${name}$"), value);
        }
    }
    message.replace("$$", "$")
}

/// A task's error in English, from the same keys the overlay words it with
/// (`extension/src/content/ui/cards.ts` `taskErrorText`).
pub fn task_error(error: &hearth_agent::TaskError) -> String {
    use hearth_agent::TaskError;
    match error {
        TaskError::ContextFull { tokens, max, window } => {
            text("taskErrorContextFull", &[tokens.to_string(), max.to_string(), window.to_string()])
        }
        TaskError::Prompt { detail } => text("taskErrorPrompt", std::slice::from_ref(detail)),
        TaskError::Model { detail } => text("taskErrorModel", std::slice::from_ref(detail)),
        TaskError::EmptyAnswer => text("taskErrorEmptyAnswer", &[]),
        TaskError::InvalidCallTwice { problem } => text("taskErrorInvalidCallTwice", std::slice::from_ref(problem)),
    }
}

/// `text` with every occurrence of the ASCII `pattern`, in any case, replaced by `with`.
fn replace_ignoring_case(text: &str, pattern: &str, with: &str) -> String {
    // ASCII lower-casing keeps every byte offset, so the matches index `text` too.
    let (lower, pattern) = (text.to_ascii_lowercase(), pattern.to_ascii_lowercase());
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    while let Some(at) = lower[from..].find(&pattern) {
        out.push_str(&text[from..from + at]);
        out.push_str(with);
        from += at + pattern.len();
    }
    out.push_str(&text[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_as_chrome_fills_them() {
        let args = ["Adapter X".to_string(), "0.5".into(), "0.001".into()];
        assert_eq!(text("failureSelfTest", &args), "The GPU (Adapter X) computed a wrong answer: error 0.5 > 0.001.");
        assert!(text(concat!("failureNoAdapter", "Fix"), &[]).contains("Chromium 124"));
        assert_eq!(text("noSuchKey", &[]), "noSuchKey");
        assert_eq!(replace_ignoring_case("a $Gpu$ b $GPU$", "$gpu$", "x"), "a x b x");
    }

    #[test]
    fn every_task_error_has_its_text() {
        use hearth_agent::TaskError;
        let errors = [
            TaskError::ContextFull { tokens: 9000, max: 8000, window: 8192 },
            TaskError::Prompt { detail: "bad input".into() },
            TaskError::Model { detail: "device lost".into() },
            TaskError::EmptyAnswer,
            TaskError::InvalidCallTwice { problem: "unknown tool `fly`".into() },
        ];
        for error in &errors {
            let english = task_error(error);
            assert!(!english.starts_with("taskError") && !english.contains('$'), "{error:?}: {english}");
        }
        assert_eq!(
            task_error(&errors[0]),
            "The conversation needs 9000 tokens but the context budget allows 8000. Your own messages are never shortened: shorten them or start a new conversation (this model and GPU hold 8192 tokens)."
        );
    }
}
