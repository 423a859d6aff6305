//! A typed, slim store of one kind: `key → Arc<T>`, where `T` keeps only what the consumers
//! read, and the changes a write made to it.
//!
//! Invariants: one copy of each object (consumers that keep one hold the same `Arc`); a write
//! whose value equals the stored one changes nothing and yields no [`Change`]; a replace (a
//! list) yields one [`Change`] per key whose value differs, appeared or went, and nothing else.

use std::collections::BTreeMap;
use std::sync::Arc;

/// One object's change: what the store held before and holds now (`None`: absent). Never both
/// `None`, never equal.
#[derive(Debug)]
pub struct Change<T> {
    /// `namespace/name` (`name` for cluster-scoped kinds): the store's own key (one allocation,
    /// which a consumer that keeps the object by key may share).
    pub key: Arc<str>,
    /// The value before the change.
    pub old: Option<Arc<T>>,
    /// The value after it.
    pub new: Option<Arc<T>>,
}

// Not derived: a derive would ask `T: Clone`, and cloning a change only clones the `Arc`s.
impl<T> Clone for Change<T> {
    fn clone(&self) -> Self {
        Change {
            key: self.key.clone(),
            old: self.old.clone(),
            new: self.new.clone(),
        }
    }
}

/// The objects of one kind, by key, in key order.
#[derive(Debug)]
pub struct Store<T> {
    objects: BTreeMap<Arc<str>, Arc<T>>,
}

impl<T> Default for Store<T> {
    fn default() -> Self {
        Store {
            objects: BTreeMap::new(),
        }
    }
}

impl<T: PartialEq> Store<T> {
    /// The object at `key`.
    pub fn get(&self, key: &str) -> Option<&Arc<T>> {
        self.objects.get(key)
    }

    /// Every object, in key order.
    pub fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.objects.values().map(|v| &**v)
    }

    /// Every (key, object), in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<T>)> + '_ {
        self.objects.iter()
    }

    /// How many objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// `key` as the store holds it (its one allocation), or a new one.
    fn own_key(&self, key: &str) -> Arc<str> {
        match self.objects.get_key_value(key) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::from(key),
        }
    }

    /// Sets `key` to `new` (`None`: removes it); the change, or `None` when the store already
    /// held exactly that.
    pub fn apply(&mut self, key: &str, new: Option<T>) -> Option<Change<T>> {
        match new {
            Some(v) if self.objects.get(key).is_some_and(|old| **old == v) => None,
            Some(v) => {
                let new = Arc::new(v);
                let key = self.own_key(key);
                let old = self.objects.insert(Arc::clone(&key), Arc::clone(&new));
                Some(Change {
                    key,
                    old,
                    new: Some(new),
                })
            }
            None => self.objects.remove_entry(key).map(|(key, old)| Change {
                key,
                old: Some(old),
                new: None,
            }),
        }
    }

    /// `key` and `v` as a list read them, sharing what the store holds: its key's allocation,
    /// and its object when equal to `v` (dropped here). A list that reads its pages through this
    /// holds no second copy of what did not change, so a relist of an unchanged cluster costs no
    /// more memory than a reference per object.
    pub fn shared(&self, key: &str, v: T) -> (Arc<str>, Arc<T>) {
        match self.objects.get_key_value(key) {
            Some((k, old)) if **old == v => (Arc::clone(k), Arc::clone(old)),
            Some((k, _)) => (Arc::clone(k), Arc::new(v)),
            None => (Arc::from(key), Arc::new(v)),
        }
    }

    /// Replaces every object with `items` (a full list, in any order, each made by
    /// [`Store::shared`]; a key twice keeps the last); the changes, in key order: values that
    /// differ, keys that appeared, keys that went.
    pub fn replace(
        &mut self,
        items: impl IntoIterator<Item = (Arc<str>, Arc<T>)>,
    ) -> Vec<Change<T>> {
        let mut next: BTreeMap<Arc<str>, Arc<T>> = BTreeMap::new();
        let mut changes = Vec::new();
        for (key, v) in items {
            // The old `Arc` is kept when the value is the same: one copy, and no change.
            let value = match self.objects.get(&*key) {
                Some(old) if Arc::ptr_eq(old, &v) || **old == *v => Arc::clone(old),
                _ => v,
            };
            next.insert(key, value);
        }
        for (key, old) in &self.objects {
            if !next.contains_key(&**key) {
                changes.push(Change {
                    key: key.clone(),
                    old: Some(Arc::clone(old)),
                    new: None,
                });
            }
        }
        for (key, new) in &next {
            let old = self.objects.get(&**key);
            if old.is_some_and(|o| Arc::ptr_eq(o, new)) {
                continue;
            }
            changes.push(Change {
                key: key.clone(),
                old: old.cloned(),
                new: Some(Arc::clone(new)),
            });
        }
        changes.sort_by(|a, b| a.key.cmp(&b.key));
        self.objects = next;
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_that_change_nothing_yield_nothing_and_a_replace_yields_its_differences() {
        let mut s: Store<u32> = Store::default();
        assert!(s.apply("a", Some(1)).is_some());
        assert!(s.apply("a", Some(1)).is_none(), "the same value");
        let c = s.apply("a", Some(2)).unwrap();
        assert_eq!((c.old.as_deref(), c.new.as_deref()), (Some(&1), Some(&2)));
        assert!(s.apply("gone", None).is_none(), "a delete of nothing");
        s.apply("b", Some(5));
        let kept = Arc::clone(s.get("b").unwrap());
        let listed = |s: &Store<u32>| [s.shared("c", 7), s.shared("b", 5)];
        let items = listed(&s);
        assert!(Arc::ptr_eq(&kept, &items[1].1), "shared while listed");
        let changes = s.replace(items);
        let keys: Vec<_> = changes
            .iter()
            .map(|c| (&*c.key, c.old.is_some(), c.new.is_some()))
            .collect();
        assert_eq!(keys, [("a", true, false), ("c", false, true)]);
        assert!(Arc::ptr_eq(&kept, s.get("b").unwrap()), "one copy kept");
        let again = listed(&s);
        assert!(s.replace(again).is_empty());
        assert_eq!(s.values().copied().collect::<Vec<_>>(), [5, 7]);
    }
}
