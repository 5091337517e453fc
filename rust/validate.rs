//! Compiled argument validators and the limits applied before any deep work.

use std::fmt::Write as _;

use jsonschema::{Retrieve, Uri, Validator};
use serde::Deserialize as _;
use serde_json::Value;

use crate::error::EngineError;

/// Bounds on one call's arguments, checked before schema validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted argument text (or estimated JSON size of an object), in bytes.
    pub max_input_bytes: usize,
    /// Deepest accepted nesting of arrays and objects: the arguments object is level 1, each array or object
    /// in it one level more, and a scalar adds none, so `{"a": [1]}` nests 2 levels deep (see
    /// [`nesting_depth`]). Text and objects are held to it alike; at most [`MAX_INPUT_DEPTH`] is honoured.
    pub max_input_depth: usize,
    /// Most schema errors reported for one call.
    pub max_errors: usize,
    /// Whether arguments that fail to parse or to validate are repaired (see [`crate::repair`]) before they
    /// are refused. Valid arguments never reach the repair.
    pub repair: bool,
}

/// The deepest nesting arguments may be allowed: every walk of a value (parsing, validation, building
/// Python objects) recurses once per level, and this bounds the stack it takes. A larger
/// [`Limits::max_input_depth`] is held as this.
pub const MAX_INPUT_DEPTH: usize = 128;

// The text scan keeps a bit per open container in a `u128`.
const _: () = assert!(MAX_INPUT_DEPTH <= u128::BITS as usize);

impl Limits {
    /// The depth limit in force: [`Limits::max_input_depth`], at most [`MAX_INPUT_DEPTH`].
    pub fn depth(&self) -> usize {
        self.max_input_depth.min(MAX_INPUT_DEPTH)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_input_bytes: 16 * 1024 * 1024,
            max_input_depth: 64,
            max_errors: 10,
            repair: false,
        }
    }
}

/// One schema violation: where in the arguments, and what rule it broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaViolation {
    /// JSON Pointer to the offending value (`""` for the arguments themselves).
    pub path: String,
    /// The validator's readable message.
    pub message: String,
}

/// Why a call's arguments were refused before the tool could run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputRejection {
    /// The argument text is not JSON.
    Malformed(String),
    /// The arguments are larger than [`Limits::max_input_bytes`].
    TooLarge { bytes: usize, limit: usize },
    /// The arguments nest deeper than [`Limits::max_input_depth`].
    TooDeep { limit: usize },
    /// The arguments are JSON but not an object.
    NotAnObject(&'static str),
    /// The arguments hold a value JSON cannot express (set by the binding).
    NotJson(String),
    /// The arguments break the tool's schema; at most [`Limits::max_errors`] are kept.
    Schema {
        violations: Vec<SchemaViolation>,
        more: bool,
    },
}

impl InputRejection {
    /// A message the model can act on.
    pub fn message(&self, tool: &str) -> String {
        match self {
            Self::Malformed(reason) => format!("arguments for `{tool}` are not valid JSON: {reason}"),
            Self::TooLarge { bytes, limit } => {
                format!("arguments for `{tool}` are {bytes} bytes, over the limit of {limit} bytes")
            }
            Self::TooDeep { limit } => format!("arguments for `{tool}` nest deeper than the limit of {limit} levels"),
            Self::NotAnObject(kind) => format!("arguments for `{tool}` must be a JSON object, got {kind}"),
            Self::NotJson(reason) => format!("arguments for `{tool}` are not JSON values: {reason}"),
            Self::Schema { violations, more } => {
                let mut text = format!("invalid arguments for `{tool}`:");
                for violation in violations {
                    let path = if violation.path.is_empty() {
                        "(root)"
                    } else {
                        violation.path.as_str()
                    };
                    let _ = write!(text, "\n- at {path}: {}", violation.message);
                }
                if *more {
                    text.push_str("\n- (more errors not shown)");
                }
                text
            }
        }
    }
}

/// Longest quote of a value in a message: an error must not echo a huge argument back.
pub const PREVIEW_CHARS: usize = 80;

/// Longest message about one schema violation (names and schema parts included).
const MAX_VIOLATION_CHARS: usize = 300;

/// `text` cut to at most `limit` characters on a character boundary, saying how much was cut.
pub fn cut_text(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}… ({} characters in all)", &text[..end], text.chars().count()),
    }
}

/// A short quote of a JSON value: its JSON text up to [`PREVIEW_CHARS`], or
/// None when the whole text is that short (serialising stops early otherwise).
fn long_preview(value: &Value) -> Option<String> {
    struct Bounded {
        text: Vec<u8>,
        limit: usize,
    }
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let room = self.limit - self.text.len();
            if buf.len() > room {
                self.text.extend_from_slice(&buf[..room]);
                return Err(std::io::Error::other("long"));
            }
            self.text.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // A few bytes over the limit, so that the cut falls on a character boundary below.
    let mut bounded = Bounded {
        text: Vec::new(),
        limit: PREVIEW_CHARS * 4 + 4,
    };
    if serde_json::to_writer(&mut bounded, value).is_ok() && bounded.text.len() <= PREVIEW_CHARS {
        return None;
    }
    let text = String::from_utf8_lossy(&bounded.text);
    let cut: String = text.chars().take(PREVIEW_CHARS).collect();
    let whole = match value {
        Value::String(s) => format!("a string of {} characters", s.chars().count()),
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::Object(map) => format!("an object of {} properties", map.len()),
        other => json_type_name(other).to_owned(),
    };
    Some(format!("{cut}… ({whole})"))
}

/// Names a JSON value's type the way JSON Schema does.
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Refuses every external document: a tool schema is self-contained, and
/// registration must never reach the network or the file system.
struct RefuseExternal;

impl Retrieve for RefuseExternal {
    fn retrieve(&self, uri: &Uri<String>) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("external reference `{uri}` is not allowed; inline it under `$defs`").into())
    }
}

/// A tool's input schema, compiled once at registration.
pub struct CompiledSchema {
    validator: Validator,
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CompiledSchema")
    }
}

impl CompiledSchema {
    /// Compiles `schema` for the tool named `tool`.
    pub fn compile(tool: &str, schema: &Value) -> Result<Self, EngineError> {
        let invalid = |message: String| EngineError::InvalidSchema {
            tool: tool.to_owned(),
            message,
        };
        if !schema.is_object() && !schema.is_boolean() {
            return Err(invalid(format!(
                "a schema must be an object, got {}",
                json_type_name(schema)
            )));
        }
        jsonschema::meta::validate(schema).map_err(|err| invalid(err.to_string()))?;
        let validator = jsonschema::options()
            .with_retriever(RefuseExternal)
            .build(schema)
            .map_err(|err| invalid(err.to_string()))?;
        Ok(Self { validator })
    }

    /// Checks the shape of `value` (depth first, then the schema).
    pub fn check(&self, value: &Value, limits: &Limits) -> Result<(), InputRejection> {
        if !value.is_object() {
            return Err(InputRejection::NotAnObject(json_type_name(value)));
        }
        if nesting_depth(value) > limits.depth() {
            return Err(InputRejection::TooDeep { limit: limits.depth() });
        }
        if self.validator.is_valid(value) {
            return Ok(());
        }
        let mut violations = Vec::new();
        let mut more = false;
        for error in self.validator.iter_errors(value) {
            if violations.len() == limits.max_errors {
                more = true;
                break;
            }
            // The value is quoted only as a short preview: a 10 MB string is not echoed back.
            let message = match long_preview(error.instance()) {
                None => error.to_string(),
                Some(preview) => error.masked_with(preview).to_string(),
            };
            violations.push(SchemaViolation {
                path: cut_text(&error.instance_path().to_string(), MAX_VIOLATION_CHARS),
                message: cut_text(&message, MAX_VIOLATION_CHARS),
            });
        }
        Err(InputRejection::Schema { violations, more })
    }
}

/// The length of `text` as a JSON string's contents: each quote, backslash and control character counted
/// as its escape is written (`\"`, `\n`, `\u0001`), so that arguments given as objects are held to
/// `max_input_bytes` as their JSON text would be.
pub fn escaped_len(text: &str) -> usize {
    text.len()
        + text
            .bytes()
            .map(|byte| match byte {
                b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
                0..=0x1f => 5,
                _ => 0,
            })
            .sum::<usize>()
}

/// Parses argument text into what Python's `json.loads` builds from it, under `limits`. Empty text means
/// "no arguments", as some providers send it.
///
/// Numbers: an integer literal is an integer (`-0` too, which `json.loads` reads as the int 0) and must fit
/// 64 bits, signed or unsigned, as an integer given in an object must; any other number is the nearest
/// 64-bit float (`1e2` is 100.0, `-1e-400` is -0.0), and one past the float range (`1e400`, which
/// `json.loads` reads as infinity) is refused, as a float infinity in an object is. `NaN` and `Infinity`
/// are not JSON and are refused, and so is an escape that leaves a lone surrogate (`"\ud800"`), which no
/// UTF-8 text holds. A repeated key keeps its first place and its last value, as in a dict.
///
/// Depth: the text is scanned first, and a container nested deeper than [`Limits::depth`] is refused
/// before anything is parsed, so that the parser's own recursion never goes past it.
pub fn parse_arguments(text: &str, limits: &Limits) -> Result<Value, InputRejection> {
    if text.len() > limits.max_input_bytes {
        return Err(InputRejection::TooLarge {
            bytes: text.len(),
            limit: limits.max_input_bytes,
        });
    }
    // JSON's own whitespace only: text of other spaces (a no-break space, U+2028) is not JSON, and is refused.
    if text.trim_matches([' ', '\t', '\n', '\r']).is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    let minus_zeros = scan(text, limits)?;
    // `-0` read as `0`: the same length, so that any error's line and column stay the text's own.
    let rewritten;
    let source = if minus_zeros.is_empty() {
        text
    } else {
        let mut bytes = text.as_bytes().to_vec();
        for at in minus_zeros {
            bytes[at] = b' ';
        }
        // Only ASCII `-` bytes were changed, to spaces: the text is still UTF-8.
        rewritten = String::from_utf8(bytes).unwrap_or_default();
        rewritten.as_str()
    };
    let mut parser = serde_json::Deserializer::from_str(source);
    // The scan held the nesting to `limits.depth()`, at most `MAX_INPUT_DEPTH`: the parser's recursion is
    // bounded by the project's limit, which may be above serde_json's own (127 levels).
    parser.disable_recursion_limit();
    Value::deserialize(&mut parser)
        .and_then(|value| parser.end().map(|()| value))
        .map_err(|err| parse_refusal(&err, source))
}

/// A parse error as a refusal: a number past the float range and a lone surrogate are JSON's syntax but
/// not values the tool can be given (as in an object); anything else is not JSON.
fn parse_refusal(err: &serde_json::Error, text: &str) -> InputRejection {
    let message = err.to_string();
    let place = format!("at line {} column {}", err.line(), err.column());
    if message.starts_with("number out of range") {
        let literal = number_near(text, err.line(), err.column());
        return InputRejection::NotJson(format!(
            "the number {} ({place}) is outside the range of a 64-bit float",
            cut_text(literal, PREVIEW_CHARS)
        ));
    }
    if message.starts_with("lone leading surrogate") || message.starts_with("unexpected end of hex escape") {
        return InputRejection::NotJson(format!(
            "an escape {place} leaves a lone surrogate, which is not valid Unicode"
        ));
    }
    InputRejection::Malformed(message)
}

/// The number literal the parser stopped in or just after, at `line` and `column` (both from 1; the
/// column counts bytes).
fn number_near(text: &str, line: usize, column: usize) -> &str {
    let line_start = if line <= 1 {
        0
    } else {
        text.match_indices('\n')
            .nth(line - 2)
            .map_or(text.len(), |(at, _)| at + 1)
    };
    let at = (line_start + column).min(text.len());
    let bytes = text.as_bytes();
    let in_number = |byte: u8| matches!(byte, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-');
    let mut start = at;
    while start > 0 && in_number(bytes[start - 1]) {
        start -= 1;
    }
    let mut end = at;
    while end < bytes.len() && in_number(bytes[end]) {
        end += 1;
    }
    // Only ASCII bytes were stepped over: both ends are character boundaries.
    &text[start..end]
}

/// One pass over `text` outside its strings, in text order, before it is parsed: refuses the first array
/// or object nested deeper than [`Limits::depth`] and the first integer literal that fits neither `i64`
/// nor `u64` (serde_json would read it as a float, losing digits), and returns where each `-0` integer
/// literal's minus sign is. Digit runs of 18 or fewer never overflow, so most numbers are only stepped over.
///
/// Where the text is not JSON, the scan may refuse it for depth or size before the parser would say so; it
/// never lets through a nesting deeper than the limit, since it counts every bracket the parser would.
fn scan(text: &str, limits: &Limits) -> Result<Vec<usize>, InputRejection> {
    let bytes = text.as_bytes();
    let limit = limits.depth();
    let mut depth = 0usize;
    let mut minus_zeros = Vec::new();
    // The last byte outside strings and whitespace: a value starts at the start, after `[` or `:`, and
    // after `,` in an array; one bit per open container (the lowest the innermost) says whether it is an
    // array (the scan stops past `limit`, at most `MAX_INPUT_DEPTH` = 128 levels).
    let mut last = None;
    let mut arrays: u128 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        match byte {
            b'"' => {
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
                i += 1;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Err(InputRejection::TooDeep { limit });
                }
                arrays = (arrays << 1) | u128::from(byte == b'[');
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                arrays >>= 1;
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                let negative = byte == b'-';
                let first_digit = if negative { i + 1 } else { i };
                let mut end = first_digit;
                while end < bytes.len() && bytes[end].is_ascii_digit() {
                    end += 1;
                }
                let fraction = end < bytes.len() && matches!(bytes[end], b'.' | b'e' | b'E');
                if !fraction && end > first_digit {
                    let literal = &text[start..end];
                    let at_value = match last {
                        None | Some(b'[' | b':') => true,
                        Some(b',') => arrays & 1 == 1,
                        Some(_) => false,
                    };
                    if literal == "-0" && at_value {
                        minus_zeros.push(start);
                    } else if end - first_digit > 18
                        && literal.parse::<i64>().is_err()
                        && literal.parse::<u64>().is_err()
                    {
                        return Err(InputRejection::NotJson(format!(
                            "the integer {} is outside the 64-bit range",
                            cut_text(literal, PREVIEW_CHARS)
                        )));
                    }
                }
                i = end.max(start + 1);
                // The rest of a number with a fraction or an exponent.
                while i < bytes.len() && matches!(bytes[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
        if !matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
            last = Some(byte);
        }
    }
    Ok(minus_zeros)
}

/// The deepest nesting of arrays and objects in `value`: an array or object is one level deeper than the
/// container it is in, the outermost is level 1, and a scalar is depth 0 (`{"a": [1]}` is depth 2).
pub fn nesting_depth(value: &Value) -> usize {
    fn containers(value: &Value) -> bool {
        matches!(value, Value::Array(_) | Value::Object(_))
    }
    // Most arguments are one flat object: answer without building a stack.
    match value {
        Value::Object(map) if !map.values().any(containers) => return 1,
        Value::Array(items) if !items.iter().any(containers) => return 1,
        _ => {}
    }
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = Vec::new();
    if containers(value) {
        stack.push((value, 1));
    }
    while let Some((node, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        match node {
            Value::Array(items) => stack.extend(items.iter().filter(|v| containers(v)).map(|v| (v, depth + 1))),
            Value::Object(map) => stack.extend(map.values().filter(|v| containers(v)).map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> CompiledSchema {
        CompiledSchema::compile(
            "read_file",
            &json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
                "required": ["path"],
                "additionalProperties": false
            }),
        )
        .unwrap()
    }

    #[test]
    fn a_string_is_as_long_as_its_json_escapes() {
        for text in ["plain", "a\"b", "back\\slash", "line\nbreak", "\u{1}", "é", "\u{1f}\t"] {
            let written = serde_json::to_string(text).unwrap();
            assert_eq!(escaped_len(text), written.len() - 2, "{text:?}");
        }
    }

    #[test]
    fn only_json_whitespace_means_no_arguments() {
        for empty in ["", " ", "\t\r\n "] {
            assert_eq!(parse_arguments(empty, &Limits::default()).unwrap(), json!({}));
        }
        // Other spaces are not JSON's: such text is refused, not read as no arguments.
        for other in ["\u{a0}", "\u{3000}", "\u{2028}", "\u{85}", " \u{feff}"] {
            assert!(parse_arguments(other, &Limits::default()).is_err(), "{other:?}");
        }
    }

    #[test]
    fn a_huge_bad_value_is_quoted_as_a_short_preview() {
        let huge = "x".repeat(1_000_000);
        let err = schema()
            .check(&json!({"path": "a", "limit": huge}), &Limits::default())
            .unwrap_err();
        let message = err.message("read_file");
        assert!(message.len() < 1_000, "{} bytes", message.len());
        assert!(message.contains("a string of 1000000 characters"), "{message}");
        assert!(message.contains("/limit"), "{message}");
    }

    #[test]
    fn a_short_bad_value_is_quoted_whole() {
        let err = schema()
            .check(&json!({"path": "a", "limit": "ten"}), &Limits::default())
            .unwrap_err();
        assert!(
            err.message("read_file").contains("\"ten\""),
            "{}",
            err.message("read_file")
        );
    }

    #[test]
    fn huge_integer_literals_are_refused_and_floats_are_not() {
        let limits = Limits::default();
        assert!(matches!(
            parse_arguments(r#"{"n": 123456789012345678901234567890}"#, &limits),
            Err(InputRejection::NotJson(_))
        ));
        assert!(matches!(
            parse_arguments(r#"{"n": -9223372036854775809}"#, &limits),
            Err(InputRejection::NotJson(_))
        ));
        assert!(parse_arguments(r#"{"n": 18446744073709551615, "m": -9223372036854775808}"#, &limits).is_ok());
        assert!(parse_arguments(r#"{"n": 1.5e300, "s": "123456789012345678901234567890"}"#, &limits).is_ok());
        assert!(parse_arguments(r#"{"n": 123456789012345678901234567890.0}"#, &limits).is_ok());
    }

    #[test]
    fn valid_arguments_pass() {
        assert_eq!(
            schema().check(&json!({"path": "a", "limit": 3}), &Limits::default()),
            Ok(())
        );
    }

    #[test]
    fn every_violation_is_reported_with_its_path() {
        let err = schema()
            .check(&json!({"limit": 0, "extra": 1}), &Limits::default())
            .unwrap_err();
        let InputRejection::Schema { violations, more } = err else {
            panic!("expected schema errors")
        };
        assert!(!more);
        let paths: Vec<_> = violations.iter().map(|v| v.path.as_str()).collect();
        assert!(paths.contains(&"/limit"), "{violations:?}");
        assert!(paths.contains(&""), "{violations:?}");
        assert_eq!(violations.len(), 3, "{violations:?}");
    }

    #[test]
    fn violations_are_capped() {
        let limits = Limits {
            max_errors: 1,
            ..Limits::default()
        };
        let err = schema().check(&json!({"limit": 0, "extra": 1}), &limits).unwrap_err();
        let InputRejection::Schema { violations, more } = err else {
            panic!("expected schema errors")
        };
        assert_eq!(violations.len(), 1);
        assert!(more);
        assert!(InputRejection::Schema { violations, more }
            .message("t")
            .contains("more errors"));
    }

    #[test]
    fn non_objects_are_refused() {
        assert_eq!(
            schema().check(&json!([1]), &Limits::default()),
            Err(InputRejection::NotAnObject("array"))
        );
    }

    #[test]
    fn depth_is_checked_before_the_schema() {
        let limits = Limits {
            max_input_depth: 3,
            ..Limits::default()
        };
        let deep = json!({"path": "a", "x": {"y": {"z": {}}}});
        assert_eq!(nesting_depth(&deep), 4);
        assert_eq!(
            schema().check(&deep, &limits),
            Err(InputRejection::TooDeep { limit: 3 })
        );
    }

    #[test]
    fn nesting_depth_counts_containers() {
        assert_eq!(nesting_depth(&json!(3)), 0);
        assert_eq!(nesting_depth(&json!({})), 1);
        assert_eq!(nesting_depth(&json!({"a": 1, "b": "c"})), 1);
        assert_eq!(nesting_depth(&json!([1, null])), 1);
        assert_eq!(nesting_depth(&json!({"a": 1, "b": [2, {"c": []}]})), 4);
        assert_eq!(nesting_depth(&json!([[], 1])), 2);
    }

    #[test]
    fn text_is_parsed_within_limits() {
        let limits = Limits {
            max_input_bytes: 10,
            ..Limits::default()
        };
        assert_eq!(parse_arguments("", &limits), Ok(json!({})));
        assert_eq!(parse_arguments(r#"{"a": 1}"#, &limits), Ok(json!({"a": 1})));
        assert!(matches!(
            parse_arguments("{\"a\": 12345678}", &limits),
            Err(InputRejection::TooLarge { .. })
        ));
        assert!(matches!(
            parse_arguments("{oops", &limits),
            Err(InputRejection::Malformed(_))
        ));
        let deep = "[".repeat(200) + &"]".repeat(200);
        let limits = Limits::default();
        assert_eq!(
            parse_arguments(&deep, &limits),
            Err(InputRejection::TooDeep { limit: 64 })
        );
    }

    /// `{"a": [[…1…]]}` nesting `depth` levels (the arguments object is the first).
    fn nested_text(depth: usize) -> String {
        format!("{{\"a\": {}1{}}}", "[".repeat(depth - 1), "]".repeat(depth - 1))
    }

    #[test]
    fn text_is_held_to_the_depth_limit_exactly_at_any_limit() {
        for limit in [1, 2, 63, 64, 65, 127, 128] {
            let limits = Limits {
                max_input_depth: limit,
                ..Limits::default()
            };
            let value = parse_arguments(&nested_text(limit), &limits).unwrap();
            assert_eq!(nesting_depth(&value), limit);
            assert_eq!(schema_free().check(&value, &limits), Ok(()));
            assert_eq!(
                parse_arguments(&nested_text(limit + 1), &limits),
                Err(InputRejection::TooDeep { limit })
            );
            // Objects nest as arrays do.
            let objects = "{\"a\": ".repeat(limit + 1) + "1" + &"}".repeat(limit + 1);
            assert_eq!(
                parse_arguments(&objects, &limits),
                Err(InputRejection::TooDeep { limit })
            );
        }
    }

    #[test]
    fn a_limit_past_the_ceiling_is_held_to_it_and_deep_text_never_recurses_past_it() {
        let limits = Limits {
            max_input_depth: 1_000_000,
            ..Limits::default()
        };
        assert_eq!(limits.depth(), MAX_INPUT_DEPTH);
        assert!(parse_arguments(&nested_text(MAX_INPUT_DEPTH), &limits).is_ok());
        let limit = MAX_INPUT_DEPTH;
        assert_eq!(
            parse_arguments(&nested_text(MAX_INPUT_DEPTH + 1), &limits),
            Err(InputRejection::TooDeep { limit })
        );
        // A million levels: refused by the scan, before the parser recurses at all.
        let deep = "[".repeat(1_000_000) + &"]".repeat(1_000_000);
        assert_eq!(parse_arguments(&deep, &limits), Err(InputRejection::TooDeep { limit }));
        let deep = format!("{{\"a\": {}", "{\"a\": [".repeat(500_000));
        assert_eq!(parse_arguments(&deep, &limits), Err(InputRejection::TooDeep { limit }));
        // Brackets inside strings are not nesting.
        let quoted = format!("{{\"a\": \"{}\\\"{}\"}}", "[".repeat(1_000), "{".repeat(1_000));
        assert!(parse_arguments(&quoted, &Limits::default()).is_ok());
    }

    fn schema_free() -> CompiledSchema {
        CompiledSchema::compile("t", &json!({"type": "object"})).unwrap()
    }

    #[test]
    fn minus_zero_is_the_integer_zero_as_json_loads_reads_it() {
        let limits = Limits::default();
        let value = parse_arguments(r#"{"a": -0, "b": [-0 , -0], "c": "-0", "d":-0}"#, &limits).unwrap();
        assert_eq!(value, json!({"a": 0, "b": [0, 0], "c": "-0", "d": 0}));
        assert!(value["a"].is_i64() && value["b"][1].is_i64() && value["d"].is_i64());
        // A fraction or an exponent makes it a float, its sign kept.
        for text in [
            r#"{"a": -0.0}"#,
            r#"{"a": -0e0}"#,
            r#"{"a": -0E+1}"#,
            r#"{"a": -1e-400}"#,
        ] {
            let value = parse_arguments(text, &limits).unwrap();
            let float = value["a"].as_f64().filter(|_| value["a"].is_f64()).expect(text);
            assert!(float == 0.0 && float.is_sign_negative(), "{text}");
        }
        // Text that is not JSON is refused as before, with the same message.
        for text in [
            r#"{"a": -01}"#,
            r#"{"a": 1-0}"#,
            r#"{"a": --0}"#,
            r#"{"a": -0x}"#,
            r#"{"a": 1,-0}"#,
            r#"{"a": 1, -0: 2}"#,
            r"{-0}",
            r#"{"a": [1] -0}"#,
        ] {
            let Err(InputRejection::Malformed(message)) = parse_arguments(text, &limits) else {
                panic!("{text}")
            };
            let serde = serde_json::from_str::<Value>(text).unwrap_err().to_string();
            assert_eq!(message, serde, "{text}");
        }
    }

    #[test]
    fn a_number_past_the_float_range_is_refused_naming_it() {
        let limits = Limits::default();
        for (text, literal, place) in [
            (r#"{"n": 1e400}"#, "1e400", "line 1 column 11"),
            ("{\"s\": \"é\",\n  \"n\": -1.5E+999}", "-1.5E+999", "line 2 column 16"),
            (
                r#"{"n": 1e99999999999999999999}"#,
                "1e99999999999999999999",
                "line 1 column",
            ),
        ] {
            let Err(InputRejection::NotJson(message)) = parse_arguments(text, &limits) else {
                panic!("{text}")
            };
            assert!(
                message.starts_with(&format!("the number {literal} (at {place}")),
                "{message}"
            );
        }
        assert_eq!(
            parse_arguments(r#"{"n": 1e-99999999999999999999}"#, &limits),
            Ok(json!({"n": 0.0}))
        );
        assert_eq!(
            parse_arguments(r#"{"n": 1.7976931348623157e308}"#, &limits),
            Ok(json!({"n": f64::MAX}))
        );
    }

    #[test]
    fn an_escaped_lone_surrogate_is_refused_as_not_unicode() {
        for text in [
            r#"{"s": "\ud800"}"#,
            r#"{"s": "\udc00"}"#,
            r#"{"s": "\ud800\u0041"}"#,
            r#"{"s": "\ud800x"}"#,
        ] {
            let Err(InputRejection::NotJson(message)) = parse_arguments(text, &Limits::default()) else {
                panic!("{text}")
            };
            assert!(message.contains("lone surrogate"), "{message}");
        }
        assert_eq!(
            parse_arguments(r#"{"s": "\ud83d\ude00"}"#, &Limits::default()),
            Ok(json!({"s": "😀"}))
        );
    }

    #[test]
    fn remote_references_are_refused_at_compile_time() {
        let err = CompiledSchema::compile("t", &json!({"$ref": "https://example.com/schema.json"})).unwrap_err();
        let EngineError::InvalidSchema { tool, message } = err else {
            panic!("expected InvalidSchema")
        };
        assert_eq!(tool, "t");
        assert!(message.contains("example.com"), "{message}");
    }

    #[test]
    fn local_references_resolve() {
        let compiled = CompiledSchema::compile(
            "t",
            &json!({"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {"type": "string"}}}),
        )
        .unwrap();
        assert!(compiled.check(&json!({"p": "x"}), &Limits::default()).is_ok());
        assert!(compiled.check(&json!({"p": 1}), &Limits::default()).is_err());
    }

    #[test]
    fn broken_schemas_are_refused() {
        assert!(CompiledSchema::compile("t", &json!({"type": "no-such-type"})).is_err());
        assert!(CompiledSchema::compile("t", &json!(3)).is_err());
    }
}
