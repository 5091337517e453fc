//! Conversion between Python objects and JSON values, done once per turn.

use ahash::AHashMap;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

use crate::direct::Build;
use crate::validate::{InputRejection, Limits};

/// Turns a Python argument object into JSON, enforcing the size and depth
/// limits as it goes so that a huge or deeply nested object costs little.
pub fn to_json(obj: &Bound<'_, PyAny>, limits: &Limits) -> Result<Value, InputRejection> {
    let mut walker = Walker { limits, bytes: 0 };
    walker.convert(obj, 0)
}

struct Walker<'a> {
    limits: &'a Limits,
    /// Estimated size of the JSON text the object would serialise to.
    bytes: usize,
}

impl Walker<'_> {
    fn grow(&mut self, bytes: usize) -> Result<(), InputRejection> {
        self.bytes += bytes;
        if self.bytes > self.limits.max_input_bytes {
            return Err(InputRejection::TooLarge {
                bytes: self.bytes,
                limit: self.limits.max_input_bytes,
            });
        }
        Ok(())
    }

    /// The depth of a container entered at `depth` (the arguments object is entered at 0, as level 1), or
    /// `TooDeep` past `max_input_depth`: the same count as [`crate::validate::nesting_depth`] and the text
    /// scan. The limit is taken as given (a tool schema is read to 256 levels); an argument limit comes from
    /// `Limits`, which holds it to `MAX_INPUT_DEPTH`, so this recursion stays bounded.
    fn enter(&self, depth: usize) -> Result<usize, InputRejection> {
        if depth >= self.limits.max_input_depth {
            return Err(InputRejection::TooDeep {
                limit: self.limits.max_input_depth,
            });
        }
        Ok(depth + 1)
    }

    fn convert(&mut self, obj: &Bound<'_, PyAny>, depth: usize) -> Result<Value, InputRejection> {
        if let Ok(text) = obj.cast::<PyString>() {
            let text = text.to_str().map_err(|_| not_unicode())?;
            self.grow(crate::validate::escaped_len(text) + 2)?;
            return Ok(Value::String(text.to_owned()));
        }
        if let Ok(dict) = obj.cast::<PyDict>() {
            let depth = self.enter(depth)?;
            self.grow(2)?;
            let mut map = Map::with_capacity(dict.len());
            for (key, value) in dict.iter() {
                let Ok(key) = key.cast::<PyString>() else {
                    return Err(InputRejection::NotJson(format!(
                        "object keys must be strings, got {}",
                        type_name(&key)
                    )));
                };
                let key = key.to_str().map_err(|_| not_unicode())?;
                self.grow(crate::validate::escaped_len(key) + 4)?;
                let value = self.convert(&value, depth)?;
                map.insert(key.to_owned(), value);
            }
            return Ok(Value::Object(map));
        }
        if obj.is_none() {
            self.grow(4)?;
            return Ok(Value::Null);
        }
        if let Ok(flag) = obj.cast::<PyBool>() {
            self.grow(5)?;
            return Ok(Value::Bool(flag.is_true()));
        }
        if obj.cast::<PyInt>().is_ok() {
            self.grow(20)?;
            if let Ok(int) = obj.extract::<i64>() {
                return Ok(Value::from(int));
            }
            if let Ok(int) = obj.extract::<u64>() {
                return Ok(Value::from(int));
            }
            return Err(InputRejection::NotJson("an integer is outside the 64-bit range".into()));
        }
        if let Ok(float) = obj.cast::<PyFloat>() {
            self.grow(24)?;
            return Number::from_f64(float.value())
                .map(Value::Number)
                .ok_or_else(|| InputRejection::NotJson(format!("{} is not a JSON number", float.value())));
        }
        let items = if let Ok(list) = obj.cast::<PyList>() {
            list.iter().collect::<Vec<_>>()
        } else if let Ok(tuple) = obj.cast::<PyTuple>() {
            tuple.iter().collect::<Vec<_>>()
        } else {
            return Err(InputRejection::NotJson(format!(
                "a value of type `{}` is not JSON",
                type_name(obj)
            )));
        };
        let depth = self.enter(depth)?;
        self.grow(2)?;
        let mut array = Vec::with_capacity(items.len());
        for item in &items {
            self.grow(1)?;
            array.push(self.convert(item, depth)?);
        }
        Ok(Value::Array(array))
    }
}

/// A string holding a lone surrogate: not Unicode, so not JSON.
pub fn not_unicode() -> InputRejection {
    InputRejection::NotJson("the text holds a lone surrogate, which is not valid Unicode".into())
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |name| name.to_string())
}

/// Longest object key kept in [`KeyStrings`]; longer keys are made afresh.
const KEPT_KEY_BYTES: usize = 64;
/// Most distinct object keys kept in [`KeyStrings`].
const KEPT_KEYS: usize = 512;

/// How many keys [`KeyStrings`] searches in order before it hashes.
const FEW_KEYS: usize = 8;

/// The Python strings made for object keys during one conversion pass: the
/// same property names come back in every call's arguments, so each is made
/// (and interned) once and shared by every dict that uses it.
///
/// The first few keys are searched in order, which for a tool's handful of
/// property names costs less than hashing the key (`ToolTable.prepare` on
/// benches/compare.py's validation texts: about 0.01 µs per call).
pub struct KeyStrings<'py> {
    few: Vec<(Box<str>, Bound<'py, PyString>)>,
    more: AHashMap<Box<str>, Bound<'py, PyString>>,
}

impl<'py> KeyStrings<'py> {
    pub fn new() -> Self {
        Self {
            few: Vec::new(),
            more: AHashMap::new(),
        }
    }

    fn get(&mut self, py: Python<'py>, key: &str) -> Bound<'py, PyString> {
        if let Some((_, kept)) = self.few.iter().find(|(kept, _)| kept.as_bytes() == key.as_bytes()) {
            return kept.clone();
        }
        if let Some(kept) = self.more.get(key) {
            return kept.clone();
        }
        if key.len() > KEPT_KEY_BYTES || self.more.len() >= KEPT_KEYS {
            return PyString::new(py, key);
        }
        let made = PyString::intern(py, key);
        if self.few.len() < FEW_KEYS {
            self.few.push((key.into(), made.clone()));
        } else {
            self.more.insert(key.into(), made.clone());
        }
        made
    }
}

/// Builds the Python object for a JSON value.
pub fn to_python<'py>(py: Python<'py>, value: &Value, keys: &mut KeyStrings<'py>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Number(number) => {
            if let Some(int) = number.as_i64() {
                int.into_pyobject(py)?.into_any()
            } else if let Some(int) = number.as_u64() {
                int.into_pyobject(py)?.into_any()
            } else {
                number.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_python(py, item, keys)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(keys.get(py, key), to_python(py, item, keys)?)?;
            }
            dict.into_any()
        }
    })
}

/// Builds the Python objects of the direct path (see [`crate::direct`]): what
/// [`to_python`] would build from the full path's value, made as the text is read.
pub struct PyBuilder<'k, 'py> {
    pub py: Python<'py>,
    pub keys: &'k mut KeyStrings<'py>,
}

impl<'py> Build for PyBuilder<'_, 'py> {
    type Value = Bound<'py, PyAny>;
    type Object = Bound<'py, PyDict>;
    type Array = Bound<'py, PyList>;

    fn null(&mut self) -> Option<Self::Value> {
        Some(self.py.None().into_bound(self.py))
    }
    fn boolean(&mut self, flag: bool) -> Option<Self::Value> {
        Some(PyBool::new(self.py, flag).to_owned().into_any())
    }
    fn int(&mut self, number: i64) -> Option<Self::Value> {
        Some(number.into_pyobject(self.py).ok()?.into_any())
    }
    fn uint(&mut self, number: u64) -> Option<Self::Value> {
        Some(number.into_pyobject(self.py).ok()?.into_any())
    }
    fn float(&mut self, number: f64) -> Option<Self::Value> {
        Some(PyFloat::new(self.py, number).into_any())
    }
    fn string(&mut self, text: &str) -> Option<Self::Value> {
        Some(PyString::new(self.py, text).into_any())
    }
    fn object(&mut self) -> Option<Self::Object> {
        Some(PyDict::new(self.py))
    }
    fn insert(&mut self, object: &mut Self::Object, key: &str, value: Self::Value) -> Option<()> {
        object.set_item(self.keys.get(self.py, key), value).ok()
    }
    fn close_object(&mut self, object: Self::Object) -> Self::Value {
        object.into_any()
    }
    fn array(&mut self) -> Option<Self::Array> {
        Some(PyList::empty(self.py))
    }
    fn push(&mut self, array: &mut Self::Array, value: Self::Value) -> Option<()> {
        array.append(value).ok()
    }
    fn close_array(&mut self, array: Self::Array) -> Self::Value {
        array.into_any()
    }
}
