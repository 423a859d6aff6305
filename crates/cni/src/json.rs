//! Strict JSON: no duplicate keys, no struct read from an array.
//!
//! JSON read strictly, with serde: a document with the same key twice in any object is refused
//! ([`from_slice_unique_keys`]), and typed values are decoded so that a struct is only ever read
//! from a JSON object, never from an array ([`from_value`]).
//!
//! Why: serde_json keeps the last of two equal keys silently (an operator's typo becomes another
//! network), and serde's derived structs also accept a JSON array of their fields in order, so
//! `"dns": [["10.0.0.10"]]` or `"prevResult": []` would be read as if they were objects.

use std::collections::HashSet;
use std::fmt;

use serde::de::value::StringDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess,
    Unexpected, Visitor,
};
use serde_json::{Map, Number, Value};

/// Prefix of the message of a duplicate-key error, so callers can tell it from a syntax error.
pub const DUPLICATE_KEY: &str = "duplicate key";

/// Parses `bytes` as one JSON value, refusing any object that holds the same key twice.
///
/// # Errors
/// serde_json's syntax errors; `duplicate key "<key>" in <path>` (where `<path>` is like
/// `plugins[0].sysctl`, or `the top-level object`) for the first repeated key.
pub fn from_slice_unique_keys(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = Unique {
        path: String::new(),
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// Decodes `value` into `T` like `serde_json::from_value`, except that a struct (or a map) is
/// never read from a JSON array, at any depth.
///
/// # Errors
/// serde_json's type errors, `invalid type: sequence, expected a JSON object` included.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, serde_json::Error> {
    T::deserialize(Strict(value))
}

/// Builds a [`Value`], refusing duplicate keys; `path` names where it is, for the message.
struct Unique {
    path: String,
}

impl Unique {
    fn at(&self, child: &str) -> Unique {
        Unique {
            path: format!("{}{child}", self.path),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Unique {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                let at = if self.path.is_empty() {
                    "the top-level object".to_owned()
                } else {
                    self.path
                };
                return Err(de::Error::custom(format!(
                    "{DUPLICATE_KEY} {key:?} in {at}"
                )));
            }
            let sep = if self.path.is_empty() { "" } else { "." };
            let v = map.next_value_seed(self.at(&format!("{sep}{key}")))?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.at(&format!("[{}]", out.len())))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// A [`Value`] as a deserializer that refuses to read a struct or map from an array, and wraps
/// every nested value the same way.
struct Strict(Value);

fn not_an_object(v: &Value) -> serde_json::Error {
    let unexpected = match v {
        Value::Array(_) => Unexpected::Seq,
        Value::String(s) => Unexpected::Str(s),
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Null => Unexpected::Unit,
        Value::Number(_) => Unexpected::Other("number"),
        Value::Object(_) => Unexpected::Map,
    };
    de::Error::invalid_type(unexpected, &"a JSON object")
}

macro_rules! forward_to_value {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
            self.0.$method(v)
        }
    )*};
}

impl<'de> Deserializer<'de> for Strict {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(a) => v.visit_seq(Elements(a.into_iter())),
            Value::Object(m) => v.visit_map(Entries {
                iter: m.into_iter(),
                value: None,
            }),
            other => other.deserialize_any(v),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => v.visit_none(),
            other => v.visit_some(Strict(other)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, Self::Error> {
        v.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(a) => v.visit_seq(Elements(a.into_iter())),
            other => other.deserialize_seq(v),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        v: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(v)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        v: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(v)
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(m) => v.visit_map(Entries {
                iter: m.into_iter(),
                value: None,
            }),
            other => Err(not_an_object(&other)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_map(v)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, v)
    }

    forward_to_value! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_f32
        deserialize_f64 deserialize_char deserialize_str deserialize_string deserialize_bytes
        deserialize_byte_buf deserialize_unit deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        v: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_unit_struct(name, v)
    }
}

struct Elements(std::vec::IntoIter<Value>);

impl<'de> SeqAccess<'de> for Elements {
    type Error = serde_json::Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        self.0
            .next()
            .map(|v| seed.deserialize(Strict(v)))
            .transpose()
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Entries {
    iter: serde_json::map::IntoIter,
    value: Option<Value>,
}

impl<'de> MapAccess<'de> for Entries {
    type Error = serde_json::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((k, v)) = self.iter.next() else {
            return Ok(None);
        };
        self.value = Some(v);
        let key: StringDeserializer<serde_json::Error> = k.into_deserializer();
        seed.deserialize(key).map(Some)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let v = self
            .value
            .take()
            .ok_or_else(|| <serde_json::Error as de::Error>::custom("value without a key"))?;
        seed.deserialize(Strict(v))
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn duplicate_keys_are_refused_at_every_depth() {
        for (doc, at) in [
            (r#"{"a":1,"a":2}"#, "\"a\" in the top-level object"),
            (r#"{"x":{"b":1,"c":2,"b":3}}"#, "\"b\" in x"),
            (r#"{"p":[{"k":1},{"k":1,"k":2}]}"#, "\"k\" in p[1]"),
            (r#"{"s":{"net.a":"1","net.a":"1"}}"#, "\"net.a\" in s"),
        ] {
            let e = from_slice_unique_keys(doc.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(DUPLICATE_KEY) && e.contains(at), "{doc}: {e}");
        }
        let v = from_slice_unique_keys(br#"{"a":{"a":1},"b":[{"a":1},{"a":2}],"A":null,"n":-1.5}"#)
            .unwrap();
        assert_eq!(v["b"][1]["a"], 2);
        assert_eq!(v["n"], -1.5);
        assert!(
            from_slice_unique_keys(b"{} {}").is_err(),
            "one document only"
        );
        assert!(from_slice_unique_keys(b"{\"a\":").is_err());
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        #[serde(default)]
        name: String,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        #[serde(default)]
        inner: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
        #[serde(default)]
        n: Option<u32>,
    }

    #[test]
    fn structs_are_read_only_from_objects() {
        let ok: Outer = from_value(serde_json::json!({
            "inner": {"name": "a"}, "list": [{"name": "b"}], "n": 3, "extra": [1]
        }))
        .unwrap();
        assert_eq!(ok.list[0].name, "b");
        assert_eq!(ok.n, Some(3));
        for bad in [
            serde_json::json!([]),
            serde_json::json!({"inner": ["a"]}),
            serde_json::json!({"inner": []}),
            serde_json::json!({"list": [["b"]]}),
            serde_json::json!({"inner": "a"}),
            serde_json::json!({"n": "3"}),
            serde_json::json!({"n": -1}),
        ] {
            assert!(from_value::<Outer>(bad.clone()).is_err(), "{bad}");
            // serde_json alone accepts the array forms.
        }
        assert!(serde_json::from_value::<Outer>(serde_json::json!({"inner": ["a"]})).is_ok());
    }
}
