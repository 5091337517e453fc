//! Repair of almost-JSON tool arguments, on the failure path only.
//!
//! [`repair_text`] reads argument text that failed to parse and applies only
//! fixes with one possible reading: a Markdown code fence, prose around one
//! complete JSON value, trailing commas, single-quoted strings and keys,
//! unquoted keys, Python's `True`/`False`/`None`, `//` and `/* */` comments,
//! raw control characters inside strings, and an object or array sent as a
//! JSON-encoded string. [`repair_to_schema`] then fixes, guided by the tool's
//! schema, a number or boolean sent as a string and a single value where an
//! array of them is wanted. Text that was cut off is never closed, and a
//! missing field is never invented: both are refused with a reason.

use std::fmt;

use serde_json::{Map, Value};

use crate::validate::{parse_arguments, InputRejection, Limits};

/// One kind of fix; its [`Fix::as_str`] is what events and results report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fix {
    CodeFence,
    SurroundingProse,
    TrailingComma,
    SingleQuotes,
    UnquotedKey,
    PythonLiteral,
    Comment,
    ControlCharacter,
    EncodedString,
    NumberAsString,
    BooleanAsString,
    SingleValueForArray,
}

impl Fix {
    /// The fix's stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CodeFence => "code_fence",
            Self::SurroundingProse => "surrounding_prose",
            Self::TrailingComma => "trailing_comma",
            Self::SingleQuotes => "single_quotes",
            Self::UnquotedKey => "unquoted_key",
            Self::PythonLiteral => "python_literal",
            Self::Comment => "comment",
            Self::ControlCharacter => "control_character",
            Self::EncodedString => "encoded_string",
            Self::NumberAsString => "number_as_string",
            Self::BooleanAsString => "boolean_as_string",
            Self::SingleValueForArray => "single_value_for_array",
        }
    }
}

impl fmt::Display for Fix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why text could not be repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The text ends inside a value: the call was cut off.
    CutOff,
    /// The text is not JSON in a way no unambiguous fix explains.
    Unrepairable(String),
    /// The text has more than one reading, said in a way the model can act on.
    Ambiguous(&'static str),
}

impl Refusal {
    /// A message the model can act on.
    pub fn message(&self, tool: &str) -> String {
        match self {
            Self::CutOff => {
                format!("arguments for `{tool}` were cut off before the JSON ended; send the whole call again")
            }
            Self::Unrepairable(reason) => format!("arguments for `{tool}` are not valid JSON: {reason}"),
            Self::Ambiguous(reason) => format!("arguments for `{tool}` are not valid JSON: {reason}"),
        }
    }
}

/// Fixes applied, each kind once, in the order first applied.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fixes(Vec<Fix>);

impl Fixes {
    fn add(&mut self, fix: Fix) {
        if !self.0.contains(&fix) {
            self.0.push(fix);
        }
    }

    /// Adds `other`'s fixes not already here.
    pub fn extend(&mut self, other: &Fixes) {
        for fix in &other.0 {
            self.add(*fix);
        }
    }

    /// The fixes, in the order first applied.
    pub fn as_slice(&self) -> &[Fix] {
        &self.0
    }

    /// Whether nothing was fixed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Repairs argument text that did not parse. Returns the decoded arguments (an
/// object) and the fixes applied, or why the text cannot be repaired. Limits
/// apply to the repaired text as to any other.
pub fn repair_text(text: &str, limits: &Limits) -> Result<(Value, Fixes), Refusal> {
    let mut fixes = Fixes::default();
    let unfenced = strip_fence(text, &mut fixes);
    let span = one_value(unfenced, &mut fixes)?;
    let rewritten = rewrite(span, &mut fixes)?;
    let value = parse_arguments(&rewritten, limits).or_else(|rejection| match rejection {
        // A top-level string holding an object or array is decoded below.
        InputRejection::NotAnObject(_) => {
            serde_json::from_str::<Value>(&rewritten).map_err(|error| Refusal::Unrepairable(error.to_string()))
        }
        InputRejection::Malformed(reason) if reason.contains("EOF") => Err(Refusal::CutOff),
        other => Err(Refusal::Unrepairable(other.message("the tool"))),
    })?;
    let value = decode_encoded(value, limits, &mut fixes)?;
    if fixes.is_empty() {
        return Err(Refusal::Unrepairable("no unambiguous fix applies".to_owned()));
    }
    Ok((value, fixes))
}

/// A top-level JSON string holding an object is decoded once (with the textual fixes it needs).
pub fn decode_encoded(value: Value, limits: &Limits, fixes: &mut Fixes) -> Result<Value, Refusal> {
    match value {
        Value::Object(_) => Ok(value),
        Value::String(inner) => {
            let trimmed = inner.trim();
            if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
                return Err(Refusal::Unrepairable(
                    "the arguments are a string, not an object".to_owned(),
                ));
            }
            let decoded = match parse_arguments(trimmed, limits) {
                Ok(decoded) => decoded,
                Err(InputRejection::NotAnObject(kind)) => {
                    return Err(Refusal::Unrepairable(format!(
                        "the encoded arguments are {kind}, not an object"
                    )))
                }
                Err(_) => {
                    // The encoded text may itself need the textual fixes.
                    let (decoded, inner_fixes) = repair_text(trimmed, limits)?;
                    for fix in inner_fixes.as_slice() {
                        fixes.add(*fix);
                    }
                    decoded
                }
            };
            fixes.add(Fix::EncodedString);
            Ok(decoded)
        }
        Value::Array(_) => Err(Refusal::Unrepairable(
            "the arguments are an array, not an object".to_owned(),
        )),
        other => Err(Refusal::Unrepairable(format!(
            "the arguments are `{other}`, not an object"
        ))),
    }
}

/// Drops a Markdown code fence (```` ```json ... ``` ````) around the text.
fn strip_fence<'a>(text: &'a str, fixes: &mut Fixes) -> &'a str {
    let trimmed = text.trim();
    let Some(after) = trimmed.strip_prefix("```") else {
        return text;
    };
    // The info string (`json`, `JSON`) runs to the end of the fence's line.
    let body = match after.find('\n') {
        Some(newline) if after[..newline].chars().all(|c| c.is_ascii_alphanumeric() || c == ' ') => {
            &after[newline + 1..]
        }
        Some(_) | None => return text,
    };
    fixes.add(Fix::CodeFence);
    body.trim_end().strip_suffix("```").unwrap_or(body)
}

/// The one JSON value in the text, with prose before or after it dropped.
fn one_value<'a>(text: &'a str, fixes: &mut Fixes) -> Result<&'a str, Refusal> {
    let trimmed = text.trim();
    if !trimmed.starts_with(['{', '[']) && trimmed.starts_with(['"', '\'']) {
        // A (possibly encoded) string value as a whole.
        return Ok(trimmed);
    }
    let Some(start) = text.find(['{', '[']) else {
        return Err(Refusal::Unrepairable("no JSON object found".to_owned()));
    };
    let end = match_close(&text[start..])?.map(|length| start + length);
    let Some(end) = end else {
        return Err(Refusal::CutOff);
    };
    let (before, after) = (text[..start].trim(), text[end..].trim());
    if !before.is_empty() || !after.is_empty() {
        // A second value after the first one makes the text ambiguous.
        if after.contains(['{', '[']) {
            return Err(Refusal::Unrepairable("more than one JSON value in the text".to_owned()));
        }
        if before.ends_with([',', '"', '\'']) {
            return Err(Refusal::Unrepairable(
                "the JSON value is part of a larger text".to_owned(),
            ));
        }
        fixes.add(Fix::SurroundingProse);
    }
    Ok(&text[start..end])
}

/// Why text with an apostrophe inside a single-quoted string is refused.
const APOSTROPHE: &str = "a single-quoted string holds an apostrophe, so which quote ends it is ambiguous; \
send the arguments as JSON, with double quotes";

/// Length of the container `text` opens, strings and comments skipped; `None` if it never closes.
fn match_close(text: &str) -> Result<Option<usize>, Refusal> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            quote @ (b'"' | b'\'') => match skip_string(bytes, at, quote) {
                Some(next) => at = next,
                // A single-quoted string that never ends in text whose brackets close: an apostrophe
                // inside one (`'it's'`) ended it early, not a cut.
                None if quote == b'\'' && text.trim_end().ends_with(['}', ']']) => {
                    return Err(Refusal::Ambiguous(APOSTROPHE));
                }
                None => return Ok(None),
            },
            b'/' if bytes.get(at + 1) == Some(&b'/') => {
                at = bytes[at..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |p| at + p);
            }
            b'/' if bytes.get(at + 1) == Some(&b'*') => match find(bytes, at + 2, b"*/") {
                Some(end) => at = end + 2,
                None => return Ok(None),
            },
            b'{' | b'[' => {
                depth += 1;
                at += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                at += 1;
                if depth == 0 {
                    return Ok(Some(at));
                }
            }
            _ => at += 1,
        }
    }
    Ok(None)
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

/// Index after the string opened at `at` by `quote`; `None` if it never ends.
fn skip_string(bytes: &[u8], at: usize, quote: u8) -> Option<usize> {
    let mut index = at + 1;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' => index += 2,
            b if b == quote => return Some(index + 1),
            _ => index += 1,
        }
    }
    None
}

/// Rewrites the lenient text into JSON, noting each fix.
fn rewrite(text: &str, fixes: &mut Fixes) -> Result<String, Refusal> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        match byte {
            b'"' | b'\'' => at = copy_string(text, at, byte, &mut out, fixes)?,
            b'/' if bytes.get(at + 1) == Some(&b'/') => {
                fixes.add(Fix::Comment);
                at = bytes[at..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |p| at + p);
            }
            b'/' if bytes.get(at + 1) == Some(&b'*') => {
                let end = find(bytes, at + 2, b"*/").ok_or(Refusal::CutOff)?;
                fixes.add(Fix::Comment);
                out.push(' ');
                at = end + 2;
            }
            b'}' | b']' => {
                let kept = out.trim_end_matches([' ', '\t', '\n', '\r']).len();
                if out[..kept].ends_with(',') {
                    let before = out[..kept - 1].trim_end_matches([' ', '\t', '\n', '\r']);
                    if before.ends_with(['{', '[', ',']) {
                        return Err(Refusal::Unrepairable("a comma without a value".to_owned()));
                    }
                    out.remove(kept - 1);
                    fixes.add(Fix::TrailingComma);
                }
                out.push(byte as char);
                at += 1;
            }
            b'-' | b'0'..=b'9' => {
                // A number token, exponent included, is copied as it is.
                let length = bytes[at..]
                    .iter()
                    .position(|&b| !(b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')))
                    .unwrap_or(bytes.len() - at);
                out.push_str(&text[at..at + length]);
                at += length;
            }
            b if b.is_ascii_alphabetic() || b == b'_' || b == b'$' => {
                let length = bytes[at..]
                    .iter()
                    .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$'))
                    .unwrap_or(bytes.len() - at);
                let word = &text[at..at + length];
                at += length;
                let rest = text[at..].trim_start_matches([' ', '\t', '\n', '\r']);
                let in_key_position = out.trim_end().ends_with(['{', ',']);
                if rest.starts_with(':') && in_key_position {
                    fixes.add(Fix::UnquotedKey);
                    out.push('"');
                    out.push_str(word);
                    out.push('"');
                    continue;
                }
                let literal = match word {
                    "true" | "false" | "null" => word,
                    "True" => "true",
                    "False" => "false",
                    "None" => "null",
                    _ => return Err(Refusal::Unrepairable(format!("`{word}` is not a JSON value"))),
                };
                if literal != word {
                    fixes.add(Fix::PythonLiteral);
                }
                out.push_str(literal);
            }
            _ => {
                // Copy one character (it may be several bytes).
                let c = text[at..].chars().next().unwrap_or(' ');
                out.push(c);
                at += c.len_utf8();
            }
        }
    }
    Ok(out)
}

/// Copies the string opened at `at` as a JSON string; returns the index after it.
fn copy_string(text: &str, at: usize, quote: u8, out: &mut String, fixes: &mut Fixes) -> Result<usize, Refusal> {
    if quote == b'\'' {
        fixes.add(Fix::SingleQuotes);
    }
    out.push('"');
    let mut chars = text[at + 1..].char_indices();
    while let Some((offset, c)) = chars.next() {
        match c {
            '\\' => {
                let Some((_, escaped)) = chars.next() else {
                    return Err(Refusal::CutOff);
                };
                if escaped == '\'' {
                    out.push('\'');
                } else {
                    out.push('\\');
                    out.push(escaped);
                }
            }
            c if c as u32 == u32::from(quote) => {
                out.push('"');
                return Ok(at + 1 + offset + 1);
            }
            '"' => out.push_str("\\\""),
            '\n' => control(out, fixes, "\\n"),
            '\r' => control(out, fixes, "\\r"),
            '\t' => control(out, fixes, "\\t"),
            c if (c as u32) < 0x20 => control(out, fixes, &format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    Err(Refusal::CutOff)
}

fn control(out: &mut String, fixes: &mut Fixes, escape: &str) {
    fixes.add(Fix::ControlCharacter);
    out.push_str(escape);
}

/// Fixes, guided by `schema`, a number or boolean sent as a string and a single
/// value where an array is wanted. Returns the fixed value and the fixes, or
/// `None` when no such fix applies. The caller validates the result again.
pub fn repair_to_schema(value: &Value, schema: &Value) -> Option<(Value, Fixes)> {
    let mut fixes = Fixes::default();
    let mut repaired = value.clone();
    coerce(&mut repaired, schema, &mut fixes, 0);
    if fixes.is_empty() {
        None
    } else {
        Some((repaired, fixes))
    }
}

fn types(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

// Nested schemas deeper than this are left alone (the value was depth-checked already).
const MAX_COERCE_DEPTH: usize = 64;

fn coerce(value: &mut Value, schema: &Value, fixes: &mut Fixes, depth: usize) {
    if depth > MAX_COERCE_DEPTH {
        return;
    }
    if let Some(Value::Array(branches)) = schema.get("anyOf").or_else(|| schema.get("oneOf")) {
        // A value no branch's type takes is fixed by the first branch whose fixes make it fit that branch.
        let fits = |value: &Value, branch: &Value| types(branch).iter().any(|kind| matches_type(value, kind));
        if !branches.iter().any(|branch| fits(value, branch)) {
            for branch in branches {
                let (mut attempt, mut attempt_fixes) = (value.clone(), Fixes::default());
                coerce(&mut attempt, branch, &mut attempt_fixes, depth + 1);
                if !attempt_fixes.is_empty() && fits(&attempt, branch) {
                    *value = attempt;
                    fixes.extend(&attempt_fixes);
                    return;
                }
            }
        }
    }
    let kinds = types(schema);
    let wants = |kind: &str| kinds.contains(&kind);
    if let Value::String(text) = value {
        if !wants("string") {
            if (wants("number") || wants("integer")) && is_json_number(text) {
                if let Ok(Value::Number(number)) = serde_json::from_str::<Value>(text) {
                    if wants("number") || number.is_i64() || number.is_u64() {
                        *value = Value::Number(number);
                        fixes.add(Fix::NumberAsString);
                        return;
                    }
                }
            }
            if wants("boolean") && (text == "true" || text == "false") {
                *value = Value::Bool(text == "true");
                fixes.add(Fix::BooleanAsString);
                return;
            }
        }
    }
    if wants("array") && !value.is_array() && !(wants("null") && value.is_null()) {
        let accepted_as_is = kinds.iter().any(|kind| matches_type(value, kind));
        if !accepted_as_is {
            if let Some(items) = schema.get("items").filter(|items| items.is_object()) {
                let mut item = value.clone();
                coerce(&mut item, items, fixes, depth + 1);
                if types(items).iter().any(|kind| matches_type(&item, kind)) {
                    *value = Value::Array(vec![item]);
                    fixes.add(Fix::SingleValueForArray);
                    return;
                }
            }
        }
    }
    match value {
        Value::Object(map) => coerce_properties(map, schema, fixes, depth),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|items| items.is_object()) {
                for item in items {
                    coerce(item, item_schema, fixes, depth + 1);
                }
            }
        }
        _ => {}
    }
}

fn coerce_properties(map: &mut Map<String, Value>, schema: &Value, fixes: &mut Fixes, depth: usize) {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return;
    };
    for (key, item) in map.iter_mut() {
        if let Some(property) = properties.get(key) {
            coerce(item, property, fixes, depth + 1);
        }
    }
}

fn matches_type(value: &Value, kind: &str) -> bool {
    match kind {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => false,
    }
}

/// Strict JSON number syntax: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn is_json_number(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut at = usize::from(bytes.first() == Some(&b'-'));
    let digits = |at: &mut usize| {
        let start = *at;
        while *at < bytes.len() && bytes[*at].is_ascii_digit() {
            *at += 1;
        }
        *at - start
    };
    let start = at;
    let whole = digits(&mut at);
    if whole == 0 || (whole > 1 && bytes[start] == b'0') {
        return false;
    }
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        if digits(&mut at) == 0 {
            return false;
        }
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        if digits(&mut at) == 0 {
            return false;
        }
    }
    at == bytes.len()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn repaired(text: &str) -> (Value, Vec<&'static str>) {
        let (value, fixes) = repair_text(text, &Limits::default()).expect("repairable");
        (value, fixes.as_slice().iter().map(|fix| fix.as_str()).collect())
    }

    fn refused(text: &str) -> Refusal {
        repair_text(text, &Limits::default()).expect_err("refused")
    }

    #[test]
    fn a_code_fence_is_dropped() {
        assert_eq!(
            repaired("```json\n{\"a\": 1}\n```"),
            (json!({"a": 1}), vec!["code_fence"])
        );
        assert_eq!(
            repaired("```\n{\"a\": 1}\n```\n"),
            (json!({"a": 1}), vec!["code_fence"])
        );
    }

    #[test]
    fn prose_around_one_object_is_dropped() {
        assert_eq!(
            repaired("Here are the arguments: {\"path\": \"a\"} Hope that helps."),
            (json!({"path": "a"}), vec!["surrounding_prose"])
        );
    }

    #[test]
    fn two_objects_in_prose_are_refused() {
        assert!(matches!(
            refused("either {\"a\": 1} or {\"a\": 2}"),
            Refusal::Unrepairable(_)
        ));
    }

    #[test]
    fn trailing_commas_are_dropped() {
        assert_eq!(
            repaired("{\"a\": [1, 2,], \"b\": 3,}"),
            (json!({"a": [1, 2], "b": 3}), vec!["trailing_comma"])
        );
        assert!(matches!(refused("{\"a\": [1,,]}"), Refusal::Unrepairable(_)));
    }

    #[test]
    fn single_quotes_become_double_quotes() {
        assert_eq!(
            repaired("{'a': 'say \"hi\"', 'b': 'it\\'s'}"),
            (json!({"a": "say \"hi\"", "b": "it's"}), vec!["single_quotes"])
        );
    }

    #[test]
    fn an_apostrophe_inside_single_quotes_is_refused() {
        // Which quote ends the string is ambiguous: the text is refused, never guessed at.
        repair_text("{'a': 'it's'}", &Limits::default()).expect_err("refused");
        repair_text("{'a': 'it's', 'b': 'x'}", &Limits::default()).expect_err("refused");
        // Said as what it is, not as text cut off: sending the same call again would not help.
        assert_eq!(
            repair_text("{'a': 'it's'}", &Limits::default()),
            Err(Refusal::Ambiguous(APOSTROPHE))
        );
        // Text that does end inside a single-quoted string is cut off.
        assert_eq!(repair_text("{'a': 'it", &Limits::default()), Err(Refusal::CutOff));
    }

    #[test]
    fn unquoted_keys_are_quoted() {
        assert_eq!(
            repaired("{path: \"a\", max_lines: 3}"),
            (json!({"path": "a", "max_lines": 3}), vec!["unquoted_key"])
        );
    }

    #[test]
    fn python_literals_become_json() {
        assert_eq!(
            repaired("{\"a\": True, \"b\": False, \"c\": None}"),
            (json!({"a": true, "b": false, "c": null}), vec!["python_literal"])
        );
        assert!(matches!(refused("{\"a\": NaN}"), Refusal::Unrepairable(_)));
    }

    #[test]
    fn comments_are_dropped() {
        assert_eq!(
            repaired("{\"a\": 1, // the count\n /* and */ \"b\": \"x//y\"}"),
            (json!({"a": 1, "b": "x//y"}), vec!["comment"])
        );
    }

    #[test]
    fn raw_control_characters_in_strings_are_escaped() {
        assert_eq!(
            repaired("{\"text\": \"line one\nline\ttwo\"}"),
            (json!({"text": "line one\nline\ttwo"}), vec!["control_character"])
        );
    }

    #[test]
    fn an_encoded_object_is_decoded() {
        assert_eq!(
            repaired("\"{\\\"a\\\": 1}\""),
            (json!({"a": 1}), vec!["encoded_string"])
        );
        assert!(matches!(refused("\"just text\""), Refusal::Unrepairable(_)));
    }

    #[test]
    fn several_fixes_are_listed_once_each_in_order() {
        assert_eq!(
            repaired("```json\n{'a': True, 'b': [1,],}\n```"),
            (
                json!({"a": true, "b": [1]}),
                vec!["code_fence", "single_quotes", "python_literal", "trailing_comma"]
            )
        );
    }

    #[test]
    fn truncated_text_is_refused_as_cut_off() {
        for text in [
            "{\"a\": 1, \"b\": [1, 2",
            "{\"a\": \"unfinished",
            "```json\n{\"a\": 1",
            "{\"a\": 1 /* no end",
            "{'a': 'x",
        ] {
            assert_eq!(refused(text), Refusal::CutOff, "{text:?}");
        }
        assert!(Refusal::CutOff.message("read_file").contains("cut off"));
    }

    #[test]
    fn a_missing_field_or_plain_garbage_is_not_invented() {
        assert!(matches!(refused("{\"a\": }"), Refusal::Unrepairable(_)));
        assert!(matches!(refused("no json here"), Refusal::Unrepairable(_)));
        assert!(matches!(refused("{\"a\" 1}"), Refusal::Unrepairable(_)));
    }

    #[test]
    fn numbers_and_booleans_sent_as_strings_follow_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "x": {"type": "number"}, "b": {"type": "boolean"}, "s": {"type": "string"}
        }});
        let (value, fixes) = repair_to_schema(&json!({"n": "3", "x": "2.5", "b": "true", "s": "4"}), &schema).unwrap();
        assert_eq!(value, json!({"n": 3, "x": 2.5, "b": true, "s": "4"}));
        assert_eq!(fixes.as_slice(), &[Fix::NumberAsString, Fix::BooleanAsString]);
        // Not a number in JSON's own syntax, or not an integer: left for validation to refuse.
        for bad in [
            json!({"n": "3.5"}),
            json!({"n": " 3"}),
            json!({"n": "0x10"}),
            json!({"b": "yes"}),
        ] {
            assert_eq!(repair_to_schema(&bad, &schema), None, "{bad}");
        }
    }

    #[test]
    fn a_single_value_is_wrapped_where_an_array_is_wanted() {
        let schema = json!({"type": "object", "properties": {
            "paths": {"type": "array", "items": {"type": "string"}},
            "ids": {"type": "array", "items": {"type": "integer"}}
        }});
        let (value, fixes) = repair_to_schema(&json!({"paths": "a.txt", "ids": "7"}), &schema).unwrap();
        assert_eq!(value, json!({"paths": ["a.txt"], "ids": [7]}));
        assert_eq!(fixes.as_slice(), &[Fix::SingleValueForArray, Fix::NumberAsString]);
        // Inside `anyOf` (an optional list, as type hints give it), the branch that the fix makes fit.
        let optional = json!({"type": "object", "properties": {
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
        }});
        assert_eq!(
            repair_to_schema(&json!({"tags": "x"}), &optional).unwrap().0,
            json!({"tags": ["x"]})
        );
        assert_eq!(repair_to_schema(&json!({"tags": null}), &optional), None);
        // An object is not wrapped into an array of strings.
        assert_eq!(repair_to_schema(&json!({"paths": {"a": 1}}), &schema), None);
    }

    #[test]
    fn is_json_number_is_strict() {
        for good in ["0", "-1", "3.25", "1e9", "-2.5E-3"] {
            assert!(is_json_number(good), "{good}");
        }
        for bad in ["", "-", "01", "1.", ".5", "1e", "+1", "NaN", "1 "] {
            assert!(!is_json_number(bad), "{bad}");
        }
    }
}

#[cfg(test)]
mod planning_tests {
    use serde_json::json;

    use crate::catalog::{Catalog, ToolSpec};
    use crate::plan::{prepare_turn, Arguments, CallInput, Verdict};
    use crate::validate::Limits;

    fn catalog() -> Catalog {
        Catalog::new(vec![ToolSpec {
            name: "read".into(),
            aliases: vec![],
            input_schema: json!({"type": "object", "properties": {
                "path": {"type": "string"}, "lines": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}}
            }, "required": ["path"]}),
        }])
        .unwrap()
    }

    fn verdict(args: Arguments<'_>, repair: bool) -> Verdict {
        let limits = Limits {
            repair,
            ..Limits::default()
        };
        let calls = [CallInput {
            id: "1",
            name: "read",
            args,
        }];
        prepare_turn(&catalog(), &calls, &[false], &limits)
            .calls
            .remove(0)
            .verdict
    }

    fn fixes(verdict: &Verdict) -> Vec<&'static str> {
        let Verdict::Repaired { fixes, .. } = verdict else {
            panic!("not repaired: {verdict:?}")
        };
        fixes.as_slice().iter().map(|fix| fix.as_str()).collect()
    }

    #[test]
    fn valid_text_plans_the_same_with_repair_on() {
        for text in [r#"{"path": "a"}"#, r#"{"path": "a", "lines": 3}"#, ""] {
            assert_eq!(
                verdict(Arguments::Text(text), true),
                verdict(Arguments::Text(text), false)
            );
        }
    }

    #[test]
    fn malformed_text_is_repaired_only_when_asked() {
        let text = "```json\n{'path': 'a', lines: '3',}\n```";
        assert!(matches!(
            verdict(Arguments::Text(text), false),
            Verdict::InvalidInput { .. }
        ));
        let repaired = verdict(Arguments::Text(text), true);
        assert_eq!(
            fixes(&repaired),
            [
                "code_fence",
                "single_quotes",
                "unquoted_key",
                "trailing_comma",
                "number_as_string"
            ]
        );
        let Verdict::Repaired { parsed, tool, .. } = repaired else {
            unreachable!()
        };
        assert_eq!((tool, parsed), (0, json!({"path": "a", "lines": 3})));
    }

    #[test]
    fn a_decoded_object_gets_the_schema_guided_fixes() {
        let repaired = verdict(Arguments::Value(json!({"path": "a", "tags": "x"})), true);
        assert_eq!(fixes(&repaired), ["single_value_for_array"]);
        assert!(matches!(
            verdict(Arguments::Value(json!({"path": "a", "tags": "x"})), false),
            Verdict::InvalidInput { .. }
        ));
    }

    #[test]
    fn a_missing_field_is_not_invented_and_cut_off_text_says_so() {
        let Verdict::InvalidInput { message, .. } = verdict(Arguments::Text("{'lines': 3}"), true) else {
            panic!()
        };
        assert!(message.contains("path"), "{message}");
        let Verdict::InvalidInput { message, .. } = verdict(Arguments::Text(r#"{"path": "a", "lin"#), true) else {
            panic!()
        };
        assert!(message.contains("cut off"), "{message}");
    }
}
