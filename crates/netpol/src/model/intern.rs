//! One shared copy of what many objects repeat: a Deployment's pods carry the same label set and
//! the same named ports, so each distinct one is kept once ([`Pool::get`]) and every pod holds an
//! `Arc` of it (at 150,000 pods their own copies were about 60 MiB of the agent's memory).
//!
//! Invariant: an interned value equals what was asked for; the pool only adds sharing, never
//! changes a value. Values no object holds any more are dropped from the pool when it has grown
//! to twice what it held after its last sweep.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

/// The distinct values of one type, each kept once.
pub(crate) struct Pool<T: ?Sized> {
    inner: Mutex<Option<Inner<T>>>,
}

struct Inner<T: ?Sized> {
    set: HashSet<Arc<T>>,
    /// The set's size after the last sweep.
    swept: usize,
}

impl<T: ?Sized + Eq + Hash> Pool<T> {
    /// An empty pool (a `static`).
    pub(crate) const fn new() -> Pool<T> {
        Pool {
            inner: Mutex::new(None),
        }
    }

    /// The pool's copy of `v`, made from `make` when it holds none.
    pub(crate) fn get(&self, v: &T, make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let inner = guard.get_or_insert_with(|| Inner {
            set: HashSet::new(),
            swept: 0,
        });
        if let Some(a) = inner.set.get(v) {
            return Arc::clone(a);
        }
        if inner.set.len() >= 2 * inner.swept.max(512) {
            // Only the pool holds these: no object uses them any more.
            inner.set.retain(|a| Arc::strong_count(a) > 1);
            inner.swept = inner.set.len();
        }
        let a = make();
        inner.set.insert(Arc::clone(&a));
        a
    }
}

/// A short string many objects repeat (a namespace's or a node's name), kept once: the pods of a
/// namespace or a node share it. Reads as a `str`.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Arc<str>);

/// Every distinct [`Name`] held.
static NAMES: Pool<str> = Pool::new();

impl Name {
    /// The name as a `str`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name(NAMES.get(s, || Arc::from(s)))
    }
}

impl From<String> for Name {
    fn from(s: String) -> Name {
        Name::from(s.as_str())
    }
}

impl From<&String> for Name {
    fn from(s: &String) -> Name {
        Name::from(s.as_str())
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, o: &str) -> bool {
        *self.0 == *o
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, o: &&str) -> bool {
        *self.0 == **o
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, o: &String) -> bool {
        *self.0 == **o
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, o: &Name) -> bool {
        **self == *o.0
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, o: &Name) -> bool {
        *self == *o.0
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, o: &Name) -> bool {
        **self == *o.0
    }
}

/// The pool's copy of the slice `v`.
pub(crate) fn slice<T: Clone + Eq + Hash>(pool: &Pool<[T]>, v: &[T]) -> Arc<[T]> {
    pool.get(v, || Arc::from(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_copy_and_unused_ones_are_swept() {
        static POOL: Pool<[u32]> = Pool::new();
        let a = slice(&POOL, &[1, 2]);
        let b = slice(&POOL, &[1, 2]);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(*slice(&POOL, &[3]), [3]);
        for i in 0..2000 {
            drop(slice(&POOL, &[i + 10]));
        }
        let held = POOL.inner.lock().unwrap().as_ref().unwrap().set.len();
        assert!(held < 1100, "unused values swept: {held} held");
        assert!(
            Arc::ptr_eq(&a, &slice(&POOL, &[1, 2])),
            "a held value stays"
        );
    }
}
