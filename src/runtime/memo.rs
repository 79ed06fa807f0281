//! Values computed once per shared object, for launches: the digest of a kernel
//! specialisation, the kernel MLX made from a generated program.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use crate::error::Result;

/// Values computed once per object shared through an `Arc`, found by the object's address.
///
/// An entry holds a `Weak` to its object, which keeps the object's allocation, and so its
/// address, from being given to anything else while the entry lives: an entry found at the
/// address of a live `Arc<T>` was computed from that very object. The objects must not
/// change once shared (no interior mutability; the `Weak` also makes `Arc::get_mut` fail),
/// so what a value was computed from cannot change under it.
pub(crate) struct ByAddress<T, V> {
    map: Mutex<BTreeMap<usize, (Weak<T>, V)>>,
}

impl<T, V: Clone> ByAddress<T, V> {
    /// An empty memo.
    pub(crate) const fn new() -> ByAddress<T, V> {
        ByAddress {
            map: Mutex::new(BTreeMap::new()),
        }
    }

    /// The value for `obj`, computed now by `make` if there is none. `make` runs under the
    /// memo's lock, so each object's value is computed once even when several threads ask
    /// at once; an error is returned and not kept (the next call tries again).
    pub(crate) fn get_or_try(&self, obj: &Arc<T>, make: impl FnOnce(&T) -> Result<V>) -> Result<V> {
        let at = Arc::as_ptr(obj) as usize;
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, v)) = map.get(&at) {
            return Ok(v.clone());
        }
        let v = make(obj)?;
        // Entries of objects dropped since are removed each time the memo doubles.
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, (o, _)| o.strong_count() > 0);
        }
        map.insert(at, (Arc::downgrade(obj), v.clone()));
        Ok(v)
    }

    /// The value kept for `obj`, if any.
    #[cfg(test)]
    pub(crate) fn peek(&self, obj: &Arc<T>) -> Option<V> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&(Arc::as_ptr(obj) as usize))
            .map(|(_, v)| v.clone())
    }

    /// Entries kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn values_follow_their_objects_not_equal_contents() {
        let memo: ByAddress<String, usize> = ByAddress::new();
        let (a, b) = (Arc::new("same".to_string()), Arc::new("same".to_string()));
        let mut calls = 0;
        let mut get = |o: &Arc<String>, v: usize| {
            memo.get_or_try(o, |_| {
                calls += 1;
                Ok(v)
            })
            .unwrap_or_else(|e| panic!("{e}"))
        };
        assert_eq!(
            (get(&a, 1), get(&b, 2), get(&a, 3), get(&b, 4)),
            (1, 2, 1, 2)
        );
        assert_eq!(calls, 2);
        // An error is not kept.
        let c = Arc::new("c".to_string());
        assert!(memo
            .get_or_try(&c, |_| Err(Error::Mlx("no".into())))
            .is_err());
        assert_eq!(memo.peek(&c), None);
        assert_eq!(memo.get_or_try(&c, |s| Ok(s.len())).ok(), Some(1));
    }

    #[test]
    fn a_dropped_object_never_lends_its_value_to_a_new_one() {
        let memo: ByAddress<u64, u64> = ByAddress::new();
        // Objects made and dropped one after another: without the entry's `Weak`, the
        // allocator would hand the same address out again.
        for i in 0..500u64 {
            let o = Arc::new(i);
            assert_eq!(memo.get_or_try(&o, |v| Ok(*v)).ok(), Some(i));
        }
        // Entries of dropped objects are removed as the memo grows.
        assert!(memo.len() < 500, "{}", memo.len());
    }
}
