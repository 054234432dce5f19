//! Text that a tree and its records share rather than copy.
//!
//! Why: a deposit copies each account it touches (copy-on-write) and writes a record per
//! account, and every `String` in them was one more allocation, most of them freed later on
//! another thread (profiled: about a quarter of a deposit's allocations). A `Text` is a
//! constant (the engine's channels), held inline when short (generated transaction ids, most
//! names: no allocation at all, and nothing for another thread to free), or one shared buffer,
//! so copying one never allocates. Statuses and origins are enums of their own.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

#[derive(Clone)]
pub enum Text {
    Static(&'static str),
    /// Up to [`INLINE`] bytes of a `str`.
    Inline(Inline),
    Shared(Arc<str>),
}

/// The longest text held inline: with its length byte, as large as the other variants.
pub const INLINE: usize = 22;

/// A whole `str` of at most [`INLINE`] bytes. Its fields are private so that nothing else can
/// make one: reading it back as a `str` unchecked relies on that.
#[derive(Clone, Copy)]
pub struct Inline {
    len: u8,
    buf: [u8; INLINE],
}

impl Text {
    pub fn as_str(&self) -> &str {
        match self {
            Text::Static(s) => s,
            Text::Inline(i) => {
                let b = &i.buf[..usize::from(i.len).min(INLINE)];
                // SAFETY: an `Inline` is made only by `Text::inline`, from a whole `str`.
                unsafe { std::str::from_utf8_unchecked(b) }
            }
            Text::Shared(s) => s,
        }
    }

    /// `s` held inline, when it fits.
    fn inline(s: &str) -> Option<Text> {
        let mut b = [0u8; INLINE];
        b.get_mut(..s.len())?.copy_from_slice(s.as_bytes());
        // At most INLINE bytes, so the length fits a u8.
        Some(Text::Inline(Inline { len: s.len() as u8, buf: b }))
    }
}

impl Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

// Hash and Eq are those of the str, so a map keyed by Text is searched by &str.
impl std::borrow::Borrow<str> for Text {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Text {
        Text::inline(s).unwrap_or_else(|| Text::Shared(Arc::from(s)))
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text::inline(&s).unwrap_or_else(|| Text::Shared(Arc::from(s)))
    }
}

impl Default for Text {
    fn default() -> Text {
        Text::Static("")
    }
}

impl PartialEq for Text {
    fn eq(&self, o: &Text) -> bool {
        self.as_str() == o.as_str()
    }
}

impl Eq for Text {}

impl PartialEq<str> for Text {
    fn eq(&self, o: &str) -> bool {
        self.as_str() == o
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, o: &&str) -> bool {
        self.as_str() == *o
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, o: &String) -> bool {
        self.as_str() == o
    }
}

impl PartialOrd for Text {
    fn partial_cmp(&self, o: &Text) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Text {
    fn cmp(&self, o: &Text) -> std::cmp::Ordering {
        self.as_str().cmp(o.as_str())
    }
}

impl std::hash::Hash for Text {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_str().hash(h)
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// Stored and sent exactly as a string is.
impl serde::Serialize for Text {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Text, D::Error> {
        String::deserialize(d).map(Text::from)
    }
}

/// The plumbing of an enum of named labels with any other text kept as `Other(Text)` (account
/// status, a posting's origin): built from its text (exact; the type's `known` names the
/// variants), shown, stored and sent exactly as its text (`as_str`).
macro_rules! labelled_text {
    ($t:ident) => {
        impl From<&str> for $t {
            fn from(s: &str) -> $t {
                $t::known(s).unwrap_or_else(|| $t::Other(Text::from(s)))
            }
        }

        impl From<String> for $t {
            fn from(s: String) -> $t {
                $t::known(&s).unwrap_or_else(|| $t::Other(Text::from(s)))
            }
        }

        impl From<Text> for $t {
            fn from(t: Text) -> $t {
                $t::known(&t).unwrap_or($t::Other(t))
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                String::deserialize(d).map($t::from)
            }
        }
    };
}
pub(crate) use labelled_text;

/// That a labelled-text value made from `s` every way reads back as `s`: its text, display,
/// bincode bytes (those of the string itself) and JSON.
#[cfg(test)]
pub(crate) fn label_round_trips<T>(s: &str) -> Result<(), proptest::test_runner::TestCaseError>
where
    T: for<'a> From<&'a str>
        + From<String>
        + From<Text>
        + std::fmt::Display
        + std::fmt::Debug
        + PartialEq
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    use proptest::prop_assert_eq;
    let cfg = bincode::config::standard();
    let v = T::from(s);
    prop_assert_eq!(v.to_string(), s);
    prop_assert_eq!(&T::from(s.to_string()), &v);
    prop_assert_eq!(&T::from(Text::from(s)), &v);
    let bytes = bincode::serde::encode_to_vec(&v, cfg).unwrap();
    prop_assert_eq!(&bytes, &bincode::serde::encode_to_vec(s, cfg).unwrap());
    let (back, _): (T, usize) = bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
    prop_assert_eq!(&back, &v);
    prop_assert_eq!(serde_json::to_string(&v).unwrap(), serde_json::to_string(s).unwrap());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_are_inline_and_others_share_one_buffer() {
        let long = "Salary and other income, monthly";
        let t = Text::from(long);
        let Text::Shared(a) = &t else { panic!("not shared: {t:?}") };
        let Text::Shared(b) = &t.clone() else { panic!("clone not shared") };
        assert!(Arc::ptr_eq(a, b));
        assert_eq!(t, long);
        assert_eq!(t, Text::Static(long));
        // Up to INLINE bytes, cut at the text's end whatever its characters.
        for s in ["", "Salary", "SYS0123456789", "ééééééééééé", "a".repeat(INLINE).as_str()] {
            for t in [Text::from(s), Text::from(s.to_string())] {
                assert!(matches!(t, Text::Inline(..)), "{t:?}");
                assert_eq!(t.as_str(), s);
            }
        }
        assert!(matches!(Text::from("a".repeat(INLINE + 1)), Text::Shared(_)));
        assert!(matches!(Text::from("éééééééééééé"), Text::Shared(_)));
        assert_eq!(std::mem::size_of::<Text>(), 24);
    }

    #[test]
    fn it_is_stored_as_a_string_is() {
        let cfg = bincode::config::standard();
        for s in ["", "User", "Salary é"] {
            let t = Text::from(s);
            let a = bincode::serde::encode_to_vec(&t, cfg).unwrap();
            assert_eq!(a, bincode::serde::encode_to_vec(s, cfg).unwrap());
            let (back, _): (Text, usize) = bincode::serde::decode_from_slice(&a, cfg).unwrap();
            assert_eq!(back, s);
            assert_eq!(serde_json::to_string(&t).unwrap(), serde_json::to_string(s).unwrap());
        }
    }
}
