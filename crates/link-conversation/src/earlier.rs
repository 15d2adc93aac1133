//! A turn sent again under the client's `Idempotency-Key`: its user entry carries the key
//! ([`user_entry`]), so the harness of either runtime finds the turn already stored
//! ([`earlier_turn`]) and answers from it instead of running it twice.
//!
//! The key is looked for among the entries a turn reads anyway for its context window (the
//! log's tail page: the last [`crate::CONTEXT_ENTRIES`] entries, fewer when they are large),
//! so it costs no extra read; a turn sent again after that many later entries runs again.

use serde_json::{json, Value};

/// The user entry's field holding the key.
pub const KEY_FIELD: &str = "idempotency_key";

/// The `{role: user}` entry of a turn's message, with its client's key when it has one.
pub fn user_entry(message: &str, key: Option<&str>) -> Value {
    let mut entry = json!({"role": "user", "content": message});
    if let Some(key) = key {
        entry[KEY_FIELD] = Value::String(key.to_owned());
    }
    entry
}

/// A key already used for another message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Idempotency-Key {key:?} was already used for another message of this agent; send a new \
     message with a new key"
)]
pub struct KeyReused {
    pub key: String,
}

/// The stored turn whose user entry carries `key`, among `entries` (a log's last ones): that
/// entry and the ones after it up to the next user entry. `None` when no entry carries it;
/// an error when the one that does holds another message than `message`.
pub fn earlier_turn<'a>(
    entries: &'a [Value],
    key: &str,
    message: &str,
) -> Result<Option<&'a [Value]>, KeyReused> {
    let is_user = |e: &Value| e["role"] == "user";
    let Some(start) = entries
        .iter()
        .rposition(|e| is_user(e) && e[KEY_FIELD] == key)
    else {
        return Ok(None);
    };
    if entries[start]["content"] != message {
        return Err(KeyReused {
            key: key.to_owned(),
        });
    }
    let end = entries[start + 1..]
        .iter()
        .position(is_user)
        .map_or(entries.len(), |n| start + 1 + n);
    Ok(Some(&entries[start..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_is_found_by_its_key_up_to_the_next_user_entry() {
        let entries = vec![
            user_entry("one", Some("k1")),
            json!({"role": "assistant", "content": "", "tool_calls": []}),
            json!({"role": "tool", "content": "{}"}),
            json!({"role": "assistant", "content": "done"}),
            user_entry("two", None),
            json!({"role": "assistant", "content": "plain"}),
            user_entry("three", Some("k3")),
            json!({"role": "assistant", "content": "last"}),
        ];
        let turn = earlier_turn(&entries, "k1", "one").unwrap().unwrap();
        assert_eq!(turn, &entries[0..4]);
        let turn = earlier_turn(&entries, "k3", "three").unwrap().unwrap();
        assert_eq!(turn, &entries[6..]);
        // Unknown keys and key-less turns find nothing; an assistant entry never matches.
        assert_eq!(earlier_turn(&entries, "k2", "two").unwrap(), None);
        let odd = [json!({"role": "assistant", "content": "one", KEY_FIELD: "k9"})];
        assert_eq!(earlier_turn(&odd, "k9", "one").unwrap(), None);
        // The key of another message is refused, naming it.
        let e = earlier_turn(&entries, "k1", "not one").unwrap_err();
        assert!(e.to_string().contains("\"k1\""), "{e}");
        // A turn cut off after its user entry is found as that one entry.
        let cut = [user_entry("cut", Some("k"))];
        assert_eq!(earlier_turn(&cut, "k", "cut").unwrap().unwrap().len(), 1);
    }

    #[test]
    fn a_key_less_entry_has_no_key_field() {
        assert_eq!(
            user_entry("hi", None),
            json!({"role": "user", "content": "hi"})
        );
        assert_eq!(user_entry("hi", Some("k"))[KEY_FIELD], "k");
    }
}
