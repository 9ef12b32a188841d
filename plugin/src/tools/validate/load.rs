//! Reading: the files' (or stdin's) YAML/JSON text as documents, a `List`'s items each a
//! document of its own, and what the checks read of any document (its name and namespace).

use serde::Deserialize;
use serde_json::Value;

/// One YAML/JSON document (a `List`'s items are documents of their own).
pub(super) struct Doc {
    pub(super) file: String,
    pub(super) label: String,
    /// The document, or why it could not be read.
    pub(super) value: Result<Value, String>,
    /// A JSON file's own text: a serde Value has already collapsed duplicate keys, which
    /// NetConf::parse refuses.
    pub(super) raw: Option<String>,
}

impl Doc {
    pub(super) fn broken(file: &str, label: &str, why: String) -> Doc {
        Doc {
            file: file.into(),
            label: label.into(),
            value: Err(why),
            raw: None,
        }
    }
}

pub(super) fn parse_text(file: &str, text: &str) -> Vec<Doc> {
    let mut out = Vec::new();
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        push_doc(
            file,
            "document 1".into(),
            value,
            Some(text.into()),
            &mut out,
        );
        return out;
    }
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let label = format!("document {}", i + 1);
        match Value::deserialize(doc) {
            Ok(Value::Null) => {} // an empty document (a trailing `---`)
            Ok(value) => push_doc(file, label, value, None, &mut out),
            Err(e) => {
                out.push(Doc::broken(
                    file,
                    &label,
                    format!("not valid YAML/JSON: {e}"),
                ));
                // The parser cannot resynchronise after a syntax error.
                break;
            }
        }
    }
    out
}

fn push_doc(file: &str, label: String, value: Value, raw: Option<String>, out: &mut Vec<Doc>) {
    if value.get("kind").and_then(Value::as_str) == Some("List") {
        match value.get("items").and_then(Value::as_array) {
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    push_doc(
                        file,
                        format!("{label} item {}", i + 1),
                        item.clone(),
                        None,
                        out,
                    );
                }
            }
            None => out.push(Doc::broken(file, &label, "a List without items".into())),
        }
        return;
    }
    out.push(Doc {
        file: file.into(),
        label,
        value: Ok(value),
        raw,
    });
}

pub(super) fn name_of(doc: &Value) -> &str {
    doc.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?")
}

pub(super) fn namespace_of(doc: &Value) -> String {
    doc.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string()
}
