//! Words on a target that say the action commits something. Matched as whole words (and short
//! phrases), not prefixes: "Order history" and "Payment methods" are links, "Place order" and
//! "Pay" commit.

/// Single words (lower case). Over-asking is the safe failure, so the verbs that publish, pay,
/// delete or send are all here, a few inflections included.
const DANGER_WORDS: &[&str] = &[
    "submit",
    "pay",
    "buy",
    "purchase",
    "checkout",
    "delete",
    "remove",
    "send",
    "publish",
    "transfer",
    "donate",
    "subscribe",
    "unsubscribe",
    "confirm",
    "post",
    "repost",
    "reply",
    "share",
    "comment",
    "tweet",
    "retweet",
    "upload",
    "sell",
    "bid",
    "withdraw",
    "erase",
    "destroy",
    "wipe",
];
/// Phrases (whole words, in order) where each word alone is harmless.
const DANGER_PHRASES: &[&[&str]] = &[
    &["place", "order"],
    &["order", "now"],
    &["place", "my", "order"],
    &["place", "your", "order"],
    &["check", "out"],
];
/// Chinese, matched as substrings (no word boundaries in the script).
const DANGER_WORDS_ZH: &[&str] = &[
    "提交", "支付", "付款", "购买", "删除", "发送", "发布", "下单", "转账", "结算", "汇款", "捐", "订阅", "确认",
    "评论", "回复", "分享", "转发",
];

/// The words of `text`, lower case, split at non-alphanumerics and at camelCase humps
/// (`deleteBtn` → `delete`, `btn`).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The first committing word or phrase in `text`, if any.
pub fn danger_word(text: &str) -> Option<String> {
    let words = words(text);
    if let Some(w) = words.iter().find(|w| DANGER_WORDS.contains(&w.as_str())) {
        return Some(w.clone());
    }
    for phrase in DANGER_PHRASES {
        if words.windows(phrase.len()).any(|win| win.iter().zip(phrase.iter()).all(|(a, b)| a == b)) {
            return Some(phrase.join(" "));
        }
    }
    DANGER_WORDS_ZH.iter().find(|d| text.contains(*d)).map(|d| (*d).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_words_not_prefixes() {
        for (text, word) in [
            ("Place order", "place order"),
            ("Pay now", "pay"),
            ("Buy it", "buy"),
            ("Delete account", "delete"),
            ("Send message", "send"),
            ("Post", "post"),
            ("Reply", "reply"),
            ("Share this", "share"),
            ("Add a comment", "comment"),
            ("Tweet", "tweet"),
            ("deleteBtn", "delete"),
            ("btn-submit", "submit"),
            ("Check out", "check out"),
            ("立即购买", "购买"),
            ("提交订单", "提交"),
            ("发表评论", "评论"),
        ] {
            assert_eq!(danger_word(text).as_deref(), Some(word), "{text}");
        }
        for harmless in [
            "Order history",
            "Payment methods",
            "Posts",
            "Comments (3)",
            "Sender",
            "Shared with me",
            "订单历史",
            "Next page",
        ] {
            assert_eq!(danger_word(harmless), None, "{harmless}");
        }
    }
}
