//! What DEL tolerates in a netconf ([`super::NetConf::parse_for_del`]): every field DEL does not
//! need to find what ADD made is dropped when ADD would refuse its value, so DEL never strands a
//! sandbox over a field it does not read.

use serde_json::{Map, Value};

use super::{check, log_settings, normalize_keys, object_or_empty};
use crate::{CniResult, Error, Version};

/// DEL only (see [`NetConf::parse_for_del`]): removes from `raw` every field DEL does not need
/// whose value ADD would refuse; returns `"<field>: <why>"` for each.
pub(super) fn drop_invalid_for_del(raw: &mut Map<String, Value>, version: Version) -> Vec<String> {
    let mut dropped = Vec::new();
    let drop_key =
        |raw: &mut Map<String, Value>, key: &str, e: Error, dropped: &mut Vec<String>| {
            raw.remove(key);
            dropped.push(format!("{key}: {}", e.msg));
        };
    if raw.contains_key("type") {
        if let Err(e) = check::top_type(raw) {
            drop_key(raw, "type", e, &mut dropped);
        }
    }
    for key in [
        "capabilities",
        "ipMasq",
        "disableCheck",
        "disableGC",
        "cniVersions",
    ] {
        let one: Map<String, Value> = raw
            .get(key)
            .map(|v| (key.to_owned(), v.clone()))
            .into_iter()
            .collect();
        if let Err(e) = check::standard_types(&one, &Map::new()) {
            drop_key(raw, key, e, &mut dropped);
        }
    }
    for key in ["runtimeConfig", "args", "ipam"] {
        if let Err(e) = object_or_empty(raw.get(key), key) {
            drop_key(raw, key, e, &mut dropped);
        }
    }
    if let Some(Value::Object(args)) = raw.get("args") {
        let mut args = args.clone();
        normalize_keys(&mut args, &["cni"]);
        if let Err(e) = object_or_empty(args.get("cni"), "args.cni") {
            drop_key(raw, "args", e, &mut dropped);
        }
    }
    if let Some(Value::Object(ipam)) = raw.get_mut("ipam") {
        if let Err(e) = check::standard_types(&Map::new(), ipam) {
            ipam.remove("type");
            dropped.push(format!("ipam.type: {}", e.msg));
        }
    }
    if let Some(v) = raw.get("dns").filter(|v| !v.is_null()) {
        if let Err(e) = check::dns("dns", v, false) {
            drop_key(raw, "dns", e, &mut dropped);
        }
    }
    if let Some(v) = raw.get("prevResult").filter(|v| !v.is_null()) {
        if let Err(e) = CniResult::from_prev_result(v, version) {
            drop_key(raw, "prevResult", e, &mut dropped);
        }
    }
    if let Err(e) = log_settings(raw) {
        for key in ["logLevel", "logFile", "logFileMaxBytes"] {
            raw.remove(key);
        }
        dropped.push(format!("logLevel, logFile, logFileMaxBytes: {}", e.msg));
    }
    dropped
}
