//! Tests' way into the store: objects as the API writes them, decoded as the watch layer decodes
//! them (`tern_watch::kinds`), then given to [`super::put`] and [`super::replace`]. An object
//! that does not decode is what the reflector counts as undecodable: an event leaves the store,
//! a list leaves it out.

use std::sync::Arc;

use serde_json::Value;
use tern_kube::client::objects::key_of;
use tern_watch::kinds::{CLUSTER_POLICIES, NAMESPACES, NODE_PEERS, PODS, POLICIES};

use super::{Put, Relist, Watched};
use crate::netpol::store::{Kind, Store};

fn decoded<T: Watched>(kind: tern_watch::Kind<T>, v: &Value) -> Option<Arc<T>> {
    (kind.decode)(v).ok().map(Arc::new)
}

fn put_one<T: Watched>(
    st: &mut Store,
    k: tern_watch::Kind<T>,
    key: &str,
    obj: Option<&Value>,
) -> Put {
    match obj.map(|v| decoded(k, v)) {
        Some(None) => Put {
            changed: false,
            read: false,
        },
        Some(Some(v)) => super::put(st, &Arc::from(key), Some(&v)),
        None => super::put::<T>(st, &Arc::from(key), None),
    }
}

/// [`super::put`] of an object's JSON (`None`: a delete).
pub(crate) fn put(st: &mut Store, kind: Kind, key: String, obj: Option<&Value>) -> Put {
    match kind {
        Kind::Pods => put_one(st, PODS, &key, obj),
        Kind::Namespaces => put_one(st, NAMESPACES, &key, obj),
        Kind::Policies => put_one(st, POLICIES, &key, obj),
        Kind::ClusterPolicies => put_one(st, CLUSTER_POLICIES, &key, obj),
        Kind::Nodes => put_one(st, NODE_PEERS, &key, obj),
    }
}

fn replace_all<T: Watched>(st: &mut Store, k: tern_watch::Kind<T>, items: &[Value]) -> Relist {
    let read: Vec<(Arc<str>, Arc<T>)> = items
        .iter()
        .filter_map(|v| Some((Arc::from(key_of(v)), decoded(k, v)?)))
        .collect();
    let mut r = super::replace(st, read.iter().map(|(k, v)| (k, v)));
    r.unread += (items.len() - read.len()) as u64;
    r
}

/// [`super::replace`] with a list's JSON.
pub(crate) fn replace(st: &mut Store, kind: Kind, items: &[Value]) -> Relist {
    match kind {
        Kind::Pods => replace_all(st, PODS, items),
        Kind::Namespaces => replace_all(st, NAMESPACES, items),
        Kind::Policies => replace_all(st, POLICIES, items),
        Kind::ClusterPolicies => replace_all(st, CLUSTER_POLICIES, items),
        Kind::Nodes => replace_all(st, NODE_PEERS, items),
    }
}
