//! An interval set's elements as nft 1.0.6 writes them (pure), for a rule's anonymous port set
//! and a named address set (`flags interval`, an ipBlock's) alike: the start of each range and,
//! flagged `NFT_SET_ELEM_INTERVAL_END`, the first key after it; none after a range that reaches
//! the key's last value (its start carries the "open" user data instead); and a flagged 0 first
//! when the first range starts above 0 (the kernel's tree then holds where the set begins).
//! The unit tests hold nft's bytes for both.

use super::super::encode::{nest_end, nest_start, put_attr, put_u32};
use super::super::encode::{NFTA_DATA_VALUE, NFTA_SET_ELEM_KEY};

/// `enum nft_set_elem_attributes`, `enum nft_set_elem_flags`, `enum nft_data_attributes`.
const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFTA_SET_ELEM_USERDATA: u16 = 6;
const NFT_SET_ELEM_INTERVAL_END: u32 = 0x1;
/// An element's user data `NFTNL_UDATA_SET_ELEM_FLAGS` = `NFTNL_SET_ELEM_F_INTERVAL_OPEN`: an
/// interval that runs to the key's last value (no end element follows).
const UDATA_INTERVAL_OPEN: [u8; 6] = [1, 4, 1, 0, 0, 0];
/// An element list stays below an attribute's 16-bit length (an IPv6 element with the open
/// flag is 44 bytes).
const ELEMENTS_PER_MESSAGE: usize = 1_200;

/// One kernel element of an interval set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bound {
    /// The key, in the low `width` bytes.
    pub(super) key: u128,
    /// `NFT_SET_ELEM_INTERVAL_END`: the first key after a range.
    pub(super) end: bool,
    /// The range runs to the key's last value.
    pub(super) open: bool,
}

/// The kernel elements of `ranges` (inclusive, sorted, disjoint, not adjacent) of keys whose
/// last value is `max`.
pub(super) fn bounds(ranges: &[(u128, u128)], max: u128) -> Vec<Bound> {
    let mut out = Vec::with_capacity(2 * ranges.len() + 1);
    let bound = |key, end, open| Bound { key, end, open };
    if ranges.first().is_some_and(|(lo, _)| *lo > 0) {
        out.push(bound(0, true, false));
    }
    for &(lo, hi) in ranges {
        if hi >= max {
            out.push(bound(lo, false, true));
        } else {
            out.push(bound(lo, false, false));
            out.push(bound(hi + 1, true, false));
        }
    }
    out
}

/// The element list's chunks, one a message: each below an attribute's length, and none
/// ending between a range's start and its end.
pub(super) fn chunks(bounds: &[Bound]) -> Vec<&[Bound]> {
    let mut out = Vec::new();
    let mut rest = bounds;
    while rest.len() > ELEMENTS_PER_MESSAGE {
        let mut cut = ELEMENTS_PER_MESSAGE;
        if !rest[cut - 1].end && !rest[cut - 1].open {
            cut -= 1;
        }
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

/// The elements of one `NFTA_SET_ELEM_LIST_ELEMENTS`, numbered from 1 as nft numbers them,
/// each key the low `width` bytes of its number in network order.
pub(super) fn put_bounds(buf: &mut Vec<u8>, bounds: &[Bound], width: usize) {
    for (i, b) in bounds.iter().enumerate() {
        let elem = nest_start(buf, (i + 1) as u16);
        if b.end {
            put_u32(buf, NFTA_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
        }
        let key = nest_start(buf, NFTA_SET_ELEM_KEY);
        put_attr(buf, NFTA_DATA_VALUE, &b.key.to_be_bytes()[16 - width..]);
        nest_end(buf, key);
        if b.open {
            put_attr(buf, NFTA_SET_ELEM_USERDATA, &UDATA_INTERVAL_OPEN);
        }
        nest_end(buf, elem);
    }
}
