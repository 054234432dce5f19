//! Value encoding: one format-version byte, then bincode 2 (serde). Keys are fixed-width
//! big-endian so sled's byte order is the logical order (user, account, sequence).

use serde::{de::DeserializeOwned, Serialize};

use super::StoreError;

const FORMAT_V1: u8 = 1;

pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    let mut out = vec![FORMAT_V1];
    let body = bincode::serde::encode_to_vec(v, bincode::config::standard())
        .map_err(|e| StoreError::Codec(e.to_string()))?;
    out.extend_from_slice(&body);
    Ok(out)
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&FORMAT_V1, body)) => bincode::serde::decode_from_slice(body, bincode::config::standard())
            .map(|(v, _)| v)
            .map_err(|e| StoreError::Codec(e.to_string())),
        _ => Err(StoreError::Codec("unknown format version".into())),
    }
}

pub const USER: u8 = b'u';
pub const ACCOUNT: u8 = b'a';
pub const LOG: u8 = b't';
pub const MAIN_TXID: u8 = b'x';

pub fn user_key(user_id: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + user_id.len());
    k.push(USER);
    k.extend_from_slice(user_id.as_bytes());
    k
}

pub fn user_prefix(tag: u8, user_no: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(33);
    k.push(tag);
    k.extend_from_slice(&user_no.to_be_bytes());
    k
}

pub fn account_key(user_no: u64, acc: u128) -> Vec<u8> {
    let mut k = user_prefix(ACCOUNT, user_no);
    k.extend_from_slice(&acc.to_be_bytes());
    k
}

pub fn log_prefix(user_no: u64, acc: u128) -> Vec<u8> {
    let mut k = user_prefix(LOG, user_no);
    k.extend_from_slice(&acc.to_be_bytes());
    k
}

pub fn log_key(user_no: u64, acc: u128, seq: u64) -> Vec<u8> {
    let mut k = log_prefix(user_no, acc);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

pub fn txid_key(user_no: u64, id: &str) -> Vec<u8> {
    let mut k = user_prefix(MAIN_TXID, user_no);
    k.extend_from_slice(id.as_bytes());
    k
}
