//! The direct path against the full path: fixed cases and random schemas and arguments.

use super::*;
use crate::validate::{parse_arguments, CompiledSchema};
use serde_json::json;

/// What the full path says of `text`: the parsed value when it accepts it.
fn full(schema: &Value, text: &str, limits: &Limits) -> Option<Value> {
    full_with(&CompiledSchema::compile("t", schema).unwrap(), text, limits)
}

fn full_with(compiled: &CompiledSchema, text: &str, limits: &Limits) -> Option<Value> {
    let value = parse_arguments(text, limits).ok()?;
    compiled.check(&value, limits).ok().map(|()| value)
}

fn direct(schema: &Value, text: &str, limits: &Limits) -> Option<Value> {
    DirectSchema::from_schema(schema)
        .expect("a direct schema")
        .build(text, limits, &mut ValueBuilder)
}

/// The direct path agrees with the full path on `text`: the same value when both accept,
/// and never an acceptance the full path refuses.
fn agree(schema: &Value, text: &str) {
    let limits = Limits::default();
    let (direct, full) = (direct(schema, text, &limits), full(schema, text, &limits));
    if let Some(value) = &direct {
        assert_eq!(Some(value), full.as_ref(), "{schema} on {text}");
        assert_eq!(value.to_string(), full.unwrap().to_string(), "{schema} on {text}");
    }
}

fn tool_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 5, "description": "where"},
            "limit": {"type": "integer", "minimum": 1, "exclusiveMaximum": 100, "default": 10},
            "mode": {"enum": ["r", "w"]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            "ratio": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "extra": {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]}
        },
        "required": ["path"],
        "additionalProperties": false
    })
}

#[test]
fn common_arguments_take_the_direct_path_and_equal_the_full_paths() {
    let schema = tool_schema();
    for text in [
        r#"{"path": "a.py"}"#,
        r#" {"path":"a","limit":99,"mode":"w","tags":["x","y"],"ratio":null} "#,
        r#"{"path": "ab", "ratio": 0.5, "extra": {"x": true, "more": [1, {"z": null}]}}"#,
        r#"{"path": "ü€😀x", "limit": 1.0}"#,
        r#"{"path": "a\"\\\u00e9", "limit": 5}"#,
        r#"{"path": "a", "ratio": -0}"#,
        r#"{"path": "a", "ratio": 1e2, "limit": 1e1}"#,
        r#"{"path": "b", "path": "a"}"#,
    ] {
        assert!(direct(&schema, text, &Limits::default()).is_some(), "{text}");
        agree(&schema, text);
    }
}

#[test]
fn what_the_full_path_refuses_is_left_to_it() {
    let schema = tool_schema();
    for text in [
        "",
        "[]",
        "{}",
        r#"{"path": ""}"#,
        r#"{"path": "abcdef"}"#,
        r#"{"path": "a", "limit": 0}"#,
        r#"{"path": "a", "limit": 100}"#,
        r#"{"path": "a", "limit": 1.5}"#,
        r#"{"path": "a", "limit": 123456789012345678901234567890}"#,
        r#"{"path": "a", "mode": "x"}"#,
        r#"{"path": "a", "tags": ["x", "y", "z"]}"#,
        r#"{"path": "a", "tags": [1]}"#,
        r#"{"path": "a", "ratio": "1"}"#,
        r#"{"path": "a", "extra": {}}"#,
        r#"{"path": "a", "other": 1}"#,
        r#"{"path": "a",}"#,
        r#"{"path": "a"} x"#,
        r#"{"path": "a\ud800"}"#,
        "{\"path\": \"a\u{1}\"}",
        r#"{"path": "a", "limit": 01}"#,
        r#"{"path": "a", "limit": 1.}"#,
        r#"{"path": "a", "ratio": 1e400}"#,
        r#"{"path": 'a'}"#,
        r#"{"path": "a", "limit": tru}"#,
    ] {
        assert_eq!(direct(&schema, text, &Limits::default()), None, "{text}");
        agree(&schema, text);
    }
}

#[test]
fn limits_hold_on_the_direct_path() {
    let schema = json!({"type": "object"});
    let small = Limits {
        max_input_bytes: 10,
        ..Limits::default()
    };
    assert_eq!(direct(&schema, r#"{"a": "0123456789"}"#, &small), None);
    let shallow = Limits {
        max_input_depth: 2,
        ..Limits::default()
    };
    assert!(direct(&schema, r#"{"a": [1]}"#, &shallow).is_some());
    assert_eq!(direct(&schema, r#"{"a": [[1]]}"#, &shallow), None);
    let deep = format!("{{\"a\": {}1{}}}", "[".repeat(200), "]".repeat(200));
    assert_eq!(direct(&schema, &deep, &Limits::default()), None);
}

#[test]
fn the_direct_path_takes_text_to_the_depth_limit_and_no_deeper_as_the_full_path() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "array"}}});
    for limit in [1, 2, 64, 127, 128] {
        let limits = Limits {
            max_input_depth: limit,
            ..Limits::default()
        };
        for depth in [limit, limit + 1] {
            let text = if depth == 1 {
                "{}".to_owned()
            } else {
                format!("{{\"a\": {}-0{}}}", "[".repeat(depth - 1), "]".repeat(depth - 1))
            };
            let (fast, full) = (direct(&schema, &text, &limits), full(&schema, &text, &limits));
            assert_eq!(fast.is_some(), depth <= limit, "{limit} {depth}");
            assert_eq!(fast, full, "{limit} {depth}");
        }
    }
}

#[test]
fn minus_zero_is_read_as_the_integer_zero_on_both_paths() {
    let schema =
        json!({"type": "object", "properties": {"i": {"type": "integer", "maximum": 0}, "n": {"type": "number"}}});
    for text in [r#"{"i": -0, "n": -0}"#, r#"{"i": -0.0, "n": -0e1}"#] {
        let fast = direct(&schema, text, &Limits::default()).expect(text);
        assert_eq!(Some(&fast), full(&schema, text, &Limits::default()).as_ref());
        let integer = !text.contains('.') && !text.contains('e');
        assert_eq!(fast["i"].is_i64(), integer, "{text}");
        assert_eq!(fast["n"].is_i64(), integer, "{text}");
        if !integer {
            assert!(fast["n"].as_f64().unwrap().is_sign_negative());
        }
    }
}

#[test]
fn bounds_compare_exactly_or_not_at_all() {
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "number", "maximum": 9_007_199_254_740_993_u64}}});
    agree(&schema, r#"{"n": 9007199254740993}"#);
    assert!(direct(&schema, r#"{"n": 9007199254740993}"#, &Limits::default()).is_some());
    // A float against an integer bound past 2^53 is left to the full path.
    assert_eq!(
        direct(&schema, r#"{"n": 9007199254740992.0}"#, &Limits::default()),
        None
    );
    let schema = json!({"type": "object", "properties": {"n": {"minimum": 0.5}}});
    assert!(direct(&schema, r#"{"n": 1}"#, &Limits::default()).is_some());
    assert_eq!(direct(&schema, r#"{"n": 0}"#, &Limits::default()), None);
    assert!(direct(&schema, r#"{"n": "not a number"}"#, &Limits::default()).is_some());
}

#[test]
fn schemas_with_other_keywords_have_no_direct_path() {
    for schema in [
        json!({"type": "object", "properties": {"p": {"type": "string", "pattern": "a"}}}),
        json!({"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "$defs": {"P": {}}}),
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
        json!({"type": "object", "properties": {"p": {"enum": [1, "a"]}}}),
        json!({"type": "object", "properties": {"p": {"anyOf": [{"type": "string", "minLength": 2}]}}}),
        json!({"type": "object", "required": ["undeclared"]}),
        json!({"type": "object", "properties": {"p": {"multipleOf": 2}}}),
        json!({"type": "string"}),
        json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}),
        json!({"type": "object", "properties": {"p": {"$schema": "https://json-schema.org/draft/2020-12/schema"}}}),
        json!(false),
    ] {
        assert!(DirectSchema::from_schema(&schema).is_none(), "{schema}");
    }
    assert!(DirectSchema::from_schema(&json!(true)).is_some());
    assert!(DirectSchema::from_schema(&json!({})).is_some());
    assert!(DirectSchema::from_schema(&json!({"$schema": "https://json-schema.org/draft/2020-12/schema"})).is_some());
}

/// A small deterministic generator, so that the differential test needs no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn random_part(rng: &mut Rng, depth: usize) -> Value {
    let mut part = Map::new();
    let types = ["string", "integer", "number", "boolean", "null", "array", "object"];
    match rng.below(6) {
        0 => {}
        1 => {
            part.insert("type".into(), json!(rng.pick(&types)));
        }
        2 => {
            part.insert("type".into(), json!([rng.pick(&types), rng.pick(&types)]));
        }
        3 => {
            part.insert(
                "anyOf".into(),
                json!([{"type": rng.pick(&types)}, {"type": rng.pick(&types)}]),
            );
        }
        4 => {
            part.insert("enum".into(), json!(["a", "bb", "é"]));
        }
        _ => {
            part.insert("const".into(), json!("a"));
        }
    }
    let numbers = [json!(0), json!(1), json!(-1), json!(2.5), json!(-0.5), json!(1e3)];
    for (keyword, chance) in [
        ("minimum", 4),
        ("maximum", 4),
        ("exclusiveMinimum", 5),
        ("exclusiveMaximum", 5),
    ] {
        if rng.below(chance) == 0 {
            part.insert(keyword.into(), rng.pick(&numbers).clone());
        }
    }
    for (keyword, chance) in [("minLength", 4), ("maxLength", 4), ("minItems", 5), ("maxItems", 5)] {
        if rng.below(chance) == 0 {
            part.insert(keyword.into(), json!(rng.below(4)));
        }
    }
    if rng.below(4) == 0 {
        part.insert("format".into(), json!(rng.pick(&["email", "date", "uri"])));
    }
    if depth < 2 && rng.below(3) == 0 {
        part.insert("items".into(), random_part(rng, depth + 1));
    }
    if depth < 2 && rng.below(3) == 0 {
        let object = random_object(rng, depth + 1);
        for (key, value) in object.as_object().unwrap() {
            if key != "type" {
                part.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(part)
}

fn random_object(rng: &mut Rng, depth: usize) -> Value {
    let names = ["a", "b", "c", "é"];
    let mut properties = Map::new();
    let mut required = Vec::new();
    for name in names.iter().take(rng.below(names.len() + 1)) {
        properties.insert((*name).into(), random_part(rng, depth));
        if rng.below(2) == 0 {
            required.push(json!(name));
        }
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": rng.below(2) == 0,
    })
}

fn random_value(rng: &mut Rng, depth: usize) -> String {
    let scalars = [
        "null",
        "true",
        "false",
        "0",
        "1",
        "-1",
        "-0",
        "2",
        "3",
        "1.0",
        "2.5",
        "-0.5",
        "1e3",
        "1E-2",
        "1000",
        "9007199254740993",
        "18446744073709551615",
        "-9223372036854775808",
        "\"\"",
        "\"a\"",
        "\"bb\"",
        "\"é\"",
        "\"\\u00e9\"",
        "\"a\\nb\"",
        "\"abcd\"",
        "\"😀\"",
        "\"a@b.c\"",
        "\"2024-13-45\"",
    ];
    match rng.below(if depth < 3 { 8 } else { 6 }) {
        6 => {
            let items: Vec<String> = (0..rng.below(4)).map(|_| random_value(rng, depth + 1)).collect();
            format!("[{}]", items.join(", "))
        }
        7 => random_members(rng, depth + 1),
        _ => (*rng.pick(&scalars)).to_owned(),
    }
}

fn random_members(rng: &mut Rng, depth: usize) -> String {
    // Distinct names (duplicates have a test of their own); "é" sometimes written as an escape.
    let mut names = vec!["a", "b", "c", "é", "d"];
    let mut members = Vec::new();
    for _ in 0..rng.below(5) {
        let name = names.swap_remove(rng.below(names.len()));
        let name = if name == "é" && rng.below(2) == 0 {
            "\\u00e9"
        } else {
            name
        };
        members.push(format!("\"{name}\": {}", random_value(rng, depth)));
    }
    format!("{{{}}}", members.join(", "))
}

#[test]
fn the_direct_path_agrees_with_the_full_validator_on_random_schemas_and_arguments() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut taken = 0;
    let mut accepted_by_both = 0;
    for _ in 0..3_000 {
        let schema = random_object(&mut rng, 0);
        let Ok(compiled) = CompiledSchema::compile("t", &schema) else {
            continue;
        };
        let direct_schema = DirectSchema::from_schema(&schema).expect("every generated schema is direct");
        taken += 1;
        for _ in 0..20 {
            let text = random_members(&mut rng, 1);
            let limits = Limits::default();
            let fast = direct_schema.build(&text, &limits, &mut ValueBuilder);
            let full = full_with(&compiled, &text, &limits);
            if let Some(value) = &fast {
                assert_eq!(Some(value), full.as_ref(), "{schema} on {text}");
                accepted_by_both += 1;
            } else if full.is_some() {
                // Left to the full path only where the direct path cannot compare exactly.
                let huge = ["9007199254740993", "18446744073709551615", "9223372036854775808"];
                assert!(huge.iter().any(|n| text.contains(n)), "{schema} on {text}");
            }
        }
    }
    assert!(taken > 2_000, "{taken}");
    assert!(accepted_by_both > 5_000, "{accepted_by_both}");
}
