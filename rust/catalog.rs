//! The tools a turn may call: names, aliases and compiled schemas.

use ahash::AHashMap;
use serde_json::Value;

use crate::direct::DirectSchema;
use crate::error::EngineError;
use crate::validate::{CompiledSchema, InputRejection, Limits};

/// What the engine needs to know of one tool.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub aliases: Vec<String>,
    pub input_schema: Value,
}

/// Registered tools, looked up by name or alias; schemas compiled once.
#[derive(Debug)]
pub struct Catalog {
    names: Vec<String>,
    schemas: Vec<CompiledSchema>,
    /// Each tool's JSON Schema as given, for the schema-guided repair (see [`crate::repair`]).
    sources: Vec<Value>,
    /// Each schema's one-pass form, when it has one (see [`crate::direct`]).
    directs: Vec<Option<DirectSchema>>,
    lookup: AHashMap<String, usize>,
}

/// Longest tool name the providers accept.
pub const MAX_NAME_LEN: usize = 64;

fn check_name(name: &str) -> Result<(), EngineError> {
    let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.chars().all(valid_char) {
        return Err(EngineError::InvalidOption {
            option: "name",
            message: format!(
                "tool name `{name}` must be 1 to {MAX_NAME_LEN} characters of letters, digits, `_`, `-` or `.`"
            ),
        });
    }
    Ok(())
}

impl Catalog {
    /// Compiles every schema and indexes names and aliases; any clash is an error.
    pub fn new(specs: Vec<ToolSpec>) -> Result<Self, EngineError> {
        let mut names = Vec::with_capacity(specs.len());
        let mut schemas = Vec::with_capacity(specs.len());
        let mut directs = Vec::with_capacity(specs.len());
        let mut sources = Vec::with_capacity(specs.len());
        let mut lookup: AHashMap<String, usize> = AHashMap::with_capacity(specs.len());
        for (index, spec) in specs.into_iter().enumerate() {
            check_name(&spec.name)?;
            schemas.push(CompiledSchema::compile(&spec.name, &spec.input_schema)?);
            directs.push(DirectSchema::from_schema(&spec.input_schema));
            sources.push(spec.input_schema.clone());
            names.push(spec.name.clone());
            for key in std::iter::once(&spec.name).chain(&spec.aliases) {
                check_name(key)?;
                if let Some(&other) = lookup.get(key) {
                    return Err(EngineError::DuplicateName {
                        name: key.clone(),
                        first: names[other].clone(),
                        second: spec.name.clone(),
                    });
                }
                lookup.insert(key.clone(), index);
            }
        }
        Ok(Self {
            names,
            schemas,
            sources,
            directs,
            lookup,
        })
    }

    /// The tool called `name`, by its name or one of its aliases.
    pub fn resolve(&self, name: &str) -> Option<usize> {
        self.lookup.get(name).copied()
    }

    /// The canonical name of tool `index`.
    pub fn name(&self, index: usize) -> &str {
        &self.names[index]
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The one-pass form of tool `index`'s schema, if it has one.
    pub fn direct(&self, index: usize) -> Option<&DirectSchema> {
        self.directs[index].as_ref()
    }

    /// Tool `index`'s JSON Schema as registered.
    pub fn schema(&self, index: usize) -> &Value {
        &self.sources[index]
    }

    /// Checks `args` against tool `index`'s schema.
    pub fn check(&self, index: usize, args: &Value, limits: &Limits) -> Result<(), InputRejection> {
        self.schemas[index].check(args, limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn spec(name: &str, aliases: &[&str]) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            aliases: aliases.iter().map(|a| (*a).to_owned()).collect(),
            input_schema: json!({"type": "object"}),
        }
    }

    #[test]
    fn names_and_aliases_resolve() {
        let catalog = Catalog::new(vec![spec("read", &["cat", "view"]), spec("grep", &[])]).unwrap();
        assert_eq!(catalog.resolve("read"), Some(0));
        assert_eq!(catalog.resolve("view"), Some(0));
        assert_eq!(catalog.resolve("grep"), Some(1));
        assert_eq!(catalog.resolve("nope"), None);
        assert_eq!(catalog.name(0), "read");
    }

    #[test]
    fn clashing_names_are_refused() {
        let err = Catalog::new(vec![spec("read", &[]), spec("read", &[])]).unwrap_err();
        assert!(matches!(err, EngineError::DuplicateName { .. }));
        let err = Catalog::new(vec![spec("read", &["grep"]), spec("grep", &[])]).unwrap_err();
        assert_eq!(
            err,
            EngineError::DuplicateName {
                name: "grep".into(),
                first: "read".into(),
                second: "grep".into()
            }
        );
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(Catalog::new(vec![spec("", &[])]).is_err());
        assert!(Catalog::new(vec![spec("has space", &[])]).is_err());
        assert!(Catalog::new(vec![spec(&"x".repeat(65), &[])]).is_err());
        assert!(Catalog::new(vec![spec("ok", &["bad/alias"])]).is_err());
        assert!(Catalog::new(vec![spec("ok", &["ok"])]).is_err());
    }
}
