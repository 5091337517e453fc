//! The direct path: a call's argument text parsed, checked and built in one
//! pass, for the schema shapes most tools have.
//!
//! The full path parses the text into a `serde_json::Value`, validates that
//! with the `jsonschema` crate, and the binding then builds Python objects
//! from it. For a schema made only of the keywords below, [`DirectSchema`]
//! does all three at once: each value is checked against its part of the
//! schema as it is read and handed straight to a [`Build`]er (the binding
//! builds Python objects; the tests build `Value`s).
//!
//! Keywords taken: `type` (a name or a list), `properties`, `required`,
//! `additionalProperties` (true or false), `items` (a schema), `minItems`,
//! `maxItems`, `minLength`, `maxLength`, `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum`, `enum` and `const` of strings, and
//! `anyOf` whose branches only name types; at the root, `$schema` naming
//! draft 2020-12, the validator's default. Annotations (`title`,
//! `description`, `default`, `examples`, `format`, …) are ignored, as the
//! validator ignores them. A schema with any other keyword has no direct path.
//!
//! [`DirectSchema::build`] answers `Some` only for text the full path
//! accepts, with the value the full path builds; for anything else (invalid
//! arguments, a number it cannot compare exactly, an escape it leaves to
//! serde) it answers `None`, which is not a verdict: the caller takes the full
//! path, which says what is wrong. The tests in `direct/tests.rs` and
//! `tests/engine/test_direct.py` hold it to the full validator on random
//! schemas and arguments; `tests/support/schema_suite.py` runs the official
//! JSON-Schema-Test-Suite's cases for each keyword it takes.

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::{Map, Value};

use crate::validate::Limits;

/// Builds the values the direct path reads: Python objects in the binding,
/// `serde_json::Value`s in the tests ([`ValueBuilder`]). A `None` from any
/// method abandons the direct path for that call.
pub trait Build {
    type Value;
    type Object;
    type Array;
    fn null(&mut self) -> Option<Self::Value>;
    fn boolean(&mut self, flag: bool) -> Option<Self::Value>;
    fn int(&mut self, number: i64) -> Option<Self::Value>;
    fn uint(&mut self, number: u64) -> Option<Self::Value>;
    fn float(&mut self, number: f64) -> Option<Self::Value>;
    fn string(&mut self, text: &str) -> Option<Self::Value>;
    fn object(&mut self) -> Option<Self::Object>;
    fn insert(&mut self, object: &mut Self::Object, key: &str, value: Self::Value) -> Option<()>;
    fn close_object(&mut self, object: Self::Object) -> Self::Value;
    fn array(&mut self) -> Option<Self::Array>;
    fn push(&mut self, array: &mut Self::Array, value: Self::Value) -> Option<()>;
    fn close_array(&mut self, array: Self::Array) -> Self::Value;
}

/// Builds `serde_json::Value`s: what the full path's parser would make.
#[derive(Debug, Default)]
pub struct ValueBuilder;

impl Build for ValueBuilder {
    type Value = Value;
    type Object = Map<String, Value>;
    type Array = Vec<Value>;
    fn null(&mut self) -> Option<Value> {
        Some(Value::Null)
    }
    fn boolean(&mut self, flag: bool) -> Option<Value> {
        Some(Value::Bool(flag))
    }
    fn int(&mut self, number: i64) -> Option<Value> {
        Some(Value::from(number))
    }
    fn uint(&mut self, number: u64) -> Option<Value> {
        Some(Value::from(number))
    }
    fn float(&mut self, number: f64) -> Option<Value> {
        serde_json::Number::from_f64(number).map(Value::Number)
    }
    fn string(&mut self, text: &str) -> Option<Value> {
        Some(Value::String(text.to_owned()))
    }
    fn object(&mut self) -> Option<Self::Object> {
        Some(Map::new())
    }
    fn insert(&mut self, object: &mut Self::Object, key: &str, value: Value) -> Option<()> {
        object.insert(key.to_owned(), value);
        Some(())
    }
    fn close_object(&mut self, object: Self::Object) -> Value {
        Value::Object(object)
    }
    fn array(&mut self) -> Option<Self::Array> {
        Some(Vec::new())
    }
    fn push(&mut self, array: &mut Self::Array, value: Value) -> Option<()> {
        array.push(value);
        Some(())
    }
    fn close_array(&mut self, array: Self::Array) -> Value {
        Value::Array(array)
    }
}

// JSON types as bits. An integer-valued number is of type `integer` and `number`.
const NULL: u8 = 1;
const BOOLEAN: u8 = 1 << 1;
const INTEGER: u8 = 1 << 2;
const NUMBER: u8 = 1 << 3;
const STRING: u8 = 1 << 4;
const ARRAY: u8 = 1 << 5;
const OBJECT: u8 = 1 << 6;
const ANY: u8 = NULL | BOOLEAN | INTEGER | NUMBER | STRING | ARRAY | OBJECT;

/// Most properties an object part may name (each has a bit in a `u64`).
const MAX_PROPERTIES: usize = 64;
/// Deepest schema the direct path takes.
const MAX_SCHEMA_DEPTH: usize = 16;
/// Integers of at most this size convert to `f64` exactly, so they compare exactly with float bounds.
const EXACT_IN_F64: u64 = 1 << 53;

/// Keywords that only annotate: the validator checks nothing for them.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
    "format",
];

/// The draft the validator applies when a schema names none, as a root's `$schema` names it.
const DRAFT_2020_12: &[&str] = &[
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2020-12/schema#",
];

/// A JSON number as read: an integer that fits 64 bits, or a float.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int(i64),
    Uint(u64),
    Float(f64),
}

impl Num {
    fn of(value: &Value) -> Option<Self> {
        let Value::Number(number) = value else { return None };
        if let Some(int) = number.as_i64() {
            Some(Self::Int(int))
        } else if let Some(int) = number.as_u64() {
            Some(Self::Uint(int))
        } else {
            number.as_f64().map(Self::Float)
        }
    }

    fn is_integer(self) -> bool {
        match self {
            Self::Int(_) | Self::Uint(_) => true,
            Self::Float(x) => x.fract() == 0.0,
        }
    }

    /// The exact order of two numbers, or None where it cannot be told cheaply
    /// (an integer past 2^53 against a float): the full path decides those.
    fn compare(self, other: Self) -> Option<Ordering> {
        let wide = |num: Self| match num {
            Self::Int(int) => Some(i128::from(int)),
            Self::Uint(int) => Some(i128::from(int)),
            Self::Float(_) => None,
        };
        let exact_float = |num: Self| match num {
            Self::Float(x) => Some(x),
            Self::Int(int) if int.unsigned_abs() <= EXACT_IN_F64 => Some(int as f64),
            Self::Uint(int) if int <= EXACT_IN_F64 => Some(int as f64),
            _ => None,
        };
        if let (Some(a), Some(b)) = (wide(self), wide(other)) {
            return Some(a.cmp(&b));
        }
        exact_float(self)?.partial_cmp(&exact_float(other)?)
    }
}

/// The checks of one part of a schema, each applying to instances of its own type.
#[derive(Debug, Clone)]
struct Part {
    types: u8,
    /// `enum` / `const` of strings: the only strings allowed.
    strings: Option<Box<[Box<str>]>>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    minimum: Option<Num>,
    maximum: Option<Num>,
    exclusive_minimum: Option<Num>,
    exclusive_maximum: Option<Num>,
    items: Option<Box<Part>>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    object: Option<Box<ObjectPart>>,
}

/// The checks of an object part: its named properties, which are required, and whether others may appear.
#[derive(Debug, Clone, Default)]
struct ObjectPart {
    properties: Vec<(Box<str>, Part)>,
    required: u64,
    closed: bool,
}

/// Anything goes: an unconstrained part (`true`, `{}`, an undeclared property of an open object).
const FREE: Part = Part {
    types: ANY,
    strings: None,
    min_length: None,
    max_length: None,
    minimum: None,
    maximum: None,
    exclusive_minimum: None,
    exclusive_maximum: None,
    items: None,
    min_items: None,
    max_items: None,
    object: None,
};

const OPEN_OBJECT: ObjectPart = ObjectPart {
    properties: Vec::new(),
    required: 0,
    closed: false,
};

/// A tool's schema in the form the direct path checks (see the module's documentation).
#[derive(Debug, Clone)]
pub struct DirectSchema {
    root: Part,
}

impl DirectSchema {
    /// The direct form of `schema`, or None when it uses a keyword the direct path does not take.
    /// `schema` must already have passed the meta-schema.
    pub fn from_schema(schema: &Value) -> Option<Self> {
        let root = part(schema, 0)?;
        (root.types & OBJECT != 0).then_some(Self { root })
    }

    /// Reads `text` as a call's arguments: `Some` with the built value when the full path would
    /// accept the text, None to leave the call to the full path.
    pub fn build<B: Build>(&self, text: &str, limits: &Limits, builder: &mut B) -> Option<B::Value> {
        if text.len() > limits.max_input_bytes {
            return None;
        }
        let mut reader = Reader {
            text,
            bytes: text.as_bytes(),
            at: 0,
            // The full path's limit, counted the same way (a container opened past it is left to the full
            // path, which refuses it); at most `MAX_INPUT_DEPTH`, which bounds this reader's recursion.
            max_depth: limits.depth(),
            builder,
        };
        reader.skip_space();
        if reader.peek()? != b'{' {
            return None;
        }
        let value = reader.value(&self.root, 0)?;
        reader.skip_space();
        (reader.at == reader.bytes.len()).then_some(value)
    }
}

/// The direct form of one part of a schema (see [`DirectSchema::from_schema`]).
fn part(schema: &Value, depth: usize) -> Option<Part> {
    if depth > MAX_SCHEMA_DEPTH {
        return None;
    }
    let map = match schema {
        Value::Bool(true) => return Some(FREE),
        Value::Object(map) => map,
        _ => return None,
    };
    let mut out = FREE;
    let mut any_of = ANY;
    let mut properties: Option<&Map<String, Value>> = None;
    let mut required: Option<&Vec<Value>> = None;
    let mut closed = false;
    for (keyword, value) in map {
        match keyword.as_str() {
            "type" => out.types = type_bits(value)?,
            "properties" => properties = Some(value.as_object()?),
            "required" => required = Some(value.as_array()?),
            "additionalProperties" => closed = !value.as_bool()?,
            "items" => out.items = Some(Box::new(part(value, depth + 1)?)),
            "minItems" => out.min_items = Some(value.as_u64()?),
            "maxItems" => out.max_items = Some(value.as_u64()?),
            "minLength" => out.min_length = Some(value.as_u64()?),
            "maxLength" => out.max_length = Some(value.as_u64()?),
            "minimum" => out.minimum = Some(Num::of(value)?),
            "maximum" => out.maximum = Some(Num::of(value)?),
            "exclusiveMinimum" => out.exclusive_minimum = Some(Num::of(value)?),
            "exclusiveMaximum" => out.exclusive_maximum = Some(Num::of(value)?),
            "enum" | "const" => {
                if out.strings.is_some() {
                    return None;
                }
                let members = match value {
                    Value::Array(members) if keyword == "enum" && !members.is_empty() => members.as_slice(),
                    Value::String(_) if keyword == "const" => std::slice::from_ref(value),
                    _ => return None,
                };
                let strings: Option<Box<[Box<str>]>> = members.iter().map(|m| m.as_str().map(Box::from)).collect();
                out.strings = Some(strings?);
            }
            "anyOf" => {
                let mut union = 0;
                for branch in value.as_array()? {
                    union |= only_type(branch)?;
                }
                any_of = union;
            }
            // The validator's default draft, named at the root.
            "$schema" if depth == 0 && DRAFT_2020_12.contains(&value.as_str()?) => {}
            name if ANNOTATIONS.contains(&name) => {}
            _ => return None,
        }
    }
    out.types &= any_of;
    if out.strings.is_some() {
        out.types &= STRING;
    }
    if properties.is_some() || required.is_some() || closed {
        out.object = Some(Box::new(object_part(properties, required, closed, depth)?));
    }
    Some(out)
}

fn object_part(
    properties: Option<&Map<String, Value>>,
    required: Option<&Vec<Value>>,
    closed: bool,
    depth: usize,
) -> Option<ObjectPart> {
    let mut object = ObjectPart {
        closed,
        ..ObjectPart::default()
    };
    for (name, schema) in properties.into_iter().flatten() {
        object.properties.push((name.as_str().into(), part(schema, depth + 1)?));
    }
    if object.properties.len() > MAX_PROPERTIES {
        return None;
    }
    for name in required.into_iter().flatten() {
        // A required name with no schema of its own is left to the full path.
        let name = name.as_str()?;
        let position = object.properties.iter().position(|(key, _)| **key == *name)?;
        object.required |= 1 << position;
    }
    Some(object)
}

/// The types a `type` keyword names.
fn type_bits(value: &Value) -> Option<u8> {
    let bit = |name: &Value| match name.as_str()? {
        "null" => Some(NULL),
        "boolean" => Some(BOOLEAN),
        "integer" => Some(INTEGER),
        "number" => Some(NUMBER | INTEGER),
        "string" => Some(STRING),
        "array" => Some(ARRAY),
        "object" => Some(OBJECT),
        _ => None,
    };
    match value {
        Value::Array(names) if !names.is_empty() => names.iter().try_fold(0, |bits, name| Some(bits | bit(name)?)),
        Value::String(_) => bit(value),
        _ => None,
    }
}

/// The types of an `anyOf` branch that says nothing but its types.
fn only_type(branch: &Value) -> Option<u8> {
    let map = branch.as_object()?;
    let mut types = None;
    for (keyword, value) in map {
        match keyword.as_str() {
            "type" => types = Some(type_bits(value)?),
            name if ANNOTATIONS.contains(&name) => {}
            _ => return None,
        }
    }
    types
}

/// One pass over argument text.
struct Reader<'t, 'b, B> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
    max_depth: usize,
    builder: &'b mut B,
}

impl<'t, B: Build> Reader<'t, '_, B> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_space();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// After a member or an item: `,` (true: another follows) or `close` (false: the container ends).
    fn more(&mut self, close: u8) -> Option<bool> {
        self.skip_space();
        let byte = self.peek()?;
        (byte == b',' || byte == close).then(|| {
            self.at += 1;
            byte == b','
        })
    }

    /// The next value, checked against `part`; `depth` counts the containers around it.
    fn value(&mut self, part: &Part, depth: usize) -> Option<B::Value> {
        self.skip_space();
        let allows = |bits: u8| part.types & bits != 0;
        match self.peek()? {
            b'"' if allows(STRING) => {
                let text = self.string()?;
                check_string(part, &text)?;
                self.builder.string(&text)
            }
            b'{' if allows(OBJECT) => self.object(part.object.as_deref().unwrap_or(&OPEN_OBJECT), depth + 1),
            b'[' if allows(ARRAY) => self.array(part, depth + 1),
            b't' if allows(BOOLEAN) => {
                self.literal("true")?;
                self.builder.boolean(true)
            }
            b'f' if allows(BOOLEAN) => {
                self.literal("false")?;
                self.builder.boolean(false)
            }
            b'n' if allows(NULL) => {
                self.literal("null")?;
                self.builder.null()
            }
            b'-' | b'0'..=b'9' => {
                let number = self.number()?;
                check_number(part, number)?;
                match number {
                    Num::Int(int) => self.builder.int(int),
                    Num::Uint(int) => self.builder.uint(int),
                    Num::Float(x) => self.builder.float(x),
                }
            }
            _ => None,
        }
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word.as_bytes()).then(|| self.at = end)
    }

    fn object(&mut self, shape: &ObjectPart, depth: usize) -> Option<B::Value> {
        if depth > self.max_depth {
            return None;
        }
        self.at += 1;
        let mut object = self.builder.object()?;
        let mut seen: u64 = 0;
        self.skip_space();
        if self.peek()? == b'}' {
            self.at += 1;
        } else {
            loop {
                self.skip_space();
                if self.peek()? != b'"' {
                    return None;
                }
                let key = self.string()?;
                self.expect(b':')?;
                let value = match shape.properties.iter().position(|(name, _)| **name == *key) {
                    Some(position) => {
                        seen |= 1 << position;
                        self.value(&shape.properties[position].1, depth)?
                    }
                    None if shape.closed => return None,
                    None => self.value(&FREE, depth)?,
                };
                self.builder.insert(&mut object, &key, value)?;
                if !self.more(b'}')? {
                    break;
                }
            }
        }
        if seen & shape.required != shape.required {
            return None;
        }
        Some(self.builder.close_object(object))
    }

    fn array(&mut self, part: &Part, depth: usize) -> Option<B::Value> {
        if depth > self.max_depth {
            return None;
        }
        self.at += 1;
        let items = part.items.as_deref().unwrap_or(&FREE);
        let mut array = self.builder.array()?;
        let mut count: u64 = 0;
        self.skip_space();
        if self.peek()? == b']' {
            self.at += 1;
        } else {
            loop {
                let item = self.value(items, depth)?;
                self.builder.push(&mut array, item)?;
                count += 1;
                if !self.more(b']')? {
                    break;
                }
            }
        }
        if part.min_items.is_some_and(|min| count < min) || part.max_items.is_some_and(|max| count > max) {
            return None;
        }
        Some(self.builder.close_array(array))
    }

    /// A string at the reader (on its opening quote). Text without escapes is
    /// borrowed; text with escapes is decoded by serde_json, so that every escape
    /// (and every refusal, as of a lone surrogate) is exactly the full path's.
    fn string(&mut self) -> Option<Cow<'t, str>> {
        let start = self.at;
        let mut at = start + 1;
        let mut escaped = false;
        loop {
            match *self.bytes.get(at)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    at += 2;
                }
                0..=0x1f => return None,
                _ => at += 1,
            }
        }
        self.at = at + 1;
        if escaped {
            serde_json::from_str::<String>(self.text.get(start..=at)?)
                .ok()
                .map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(&self.text[start + 1..at]))
        }
    }

    /// A number at the reader, as the full path reads it (and `json.loads`): integers that fit 64 bits as
    /// integers (`-0` as the integer 0), others refused (None), and fractions and exponents parsed by
    /// serde_json itself (the nearest float; None past the float range).
    fn number(&mut self) -> Option<Num> {
        let start = self.at;
        let digits = |reader: &mut Self| {
            let first = reader.at;
            while reader.peek().is_some_and(|b| b.is_ascii_digit()) {
                reader.at += 1;
            }
            reader.at > first
        };
        let negative = self.peek()? == b'-';
        if negative {
            self.at += 1;
        }
        if self.peek()? == b'0' {
            self.at += 1;
        } else if !digits(self) {
            return None;
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.at += 1;
            integer = false;
            if !digits(self) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            integer = false;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            if !digits(self) {
                return None;
            }
        }
        let literal = &self.text[start..self.at];
        if !integer {
            return serde_json::from_str::<f64>(literal).ok().map(Num::Float);
        }
        if negative {
            // `-0` too, as the integer 0.
            return literal.parse::<i64>().ok().map(Num::Int);
        }
        let int = literal.parse::<u64>().ok()?;
        Some(i64::try_from(int).map_or(Num::Uint(int), Num::Int))
    }
}

fn check_string(part: &Part, text: &str) -> Option<()> {
    if part.min_length.is_some() || part.max_length.is_some() {
        let length = text.chars().count() as u64;
        if part.min_length.is_some_and(|min| length < min) || part.max_length.is_some_and(|max| length > max) {
            return None;
        }
    }
    match &part.strings {
        Some(allowed) if !allowed.iter().any(|member| **member == *text) => None,
        _ => Some(()),
    }
}

fn check_number(part: &Part, number: Num) -> Option<()> {
    let kind = if number.is_integer() { INTEGER } else { NUMBER };
    if part.types & kind == 0 {
        return None;
    }
    let holds = |bound: Option<Num>, allowed: &[Ordering]| match bound {
        None => Some(()),
        Some(bound) => allowed.contains(&number.compare(bound)?).then_some(()),
    };
    holds(part.minimum, &[Ordering::Greater, Ordering::Equal])?;
    holds(part.maximum, &[Ordering::Less, Ordering::Equal])?;
    holds(part.exclusive_minimum, &[Ordering::Greater])?;
    holds(part.exclusive_maximum, &[Ordering::Less])
}

#[cfg(test)]
mod tests;
