//! How often each `.tflite` content is decoded ([`DecodeLog`]): how a test
//! sees that a command reads its model once. Every reading of model bytes
//! notes itself here (`crate::tflite::root`).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// The decodes of each distinct `.tflite` content while a [`DecodeLog`]
/// is alive, by a hash of the bytes.
static DECODES: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

/// Counts how often each `.tflite` content is decoded while it lives: how a
/// test sees that a command reads its model once. One at a time.
pub struct DecodeLog(());

impl DecodeLog {
    /// Starts counting (from zero).
    pub fn start() -> DecodeLog {
        *lock() = Some(HashMap::new());
        DecodeLog(())
    }

    /// How often `bytes` were decoded since the log started.
    pub fn decodes_of(&self, bytes: &[u8]) -> usize {
        lock()
            .as_ref()
            .and_then(|m| m.get(&content_hash(bytes)).copied())
            .unwrap_or(0)
    }
}

impl Drop for DecodeLog {
    fn drop(&mut self) {
        *lock() = None;
    }
}

fn lock() -> std::sync::MutexGuard<'static, Option<HashMap<u64, usize>>> {
    DECODES.lock().unwrap_or_else(|e| e.into_inner())
}

fn content_hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Notes one decode of `bytes`, when a [`DecodeLog`] is counting.
pub(crate) fn note_decode(bytes: &[u8]) {
    if let Some(map) = lock().as_mut() {
        *map.entry(content_hash(bytes)).or_default() += 1;
    }
}
