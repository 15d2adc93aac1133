//! The report vocabulary, shared by the runtime runner that writes reports and the xtask that
//! reads them: which runtime ran ([`Profile`]), how ([`Mode`]), the checks a report carries
//! ([`CheckName`]) and their verdicts ([`Status`]), and the records ([`records`]). Serde only,
//! so reading a report needs none of the runtime's dependencies.
//!
//! Every vocabulary enum is declared with `vocabulary!`, which names each variant's string
//! once: `as_str`, `Display`, `FromStr` and serde all use that one string, so the JSON on the
//! wire is exactly the words listed here.

/// Declares a closed set of words: a `Copy` enum whose variants each name their one string,
/// with `ALL` (declaration order), `as_str`, `Display`, `FromStr` and string serde.
///
/// `$what` names the set in the `FromStr` error (``unknown mode `x`: use `a` or `b` ``).
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$($word),+].len()] = [$($name::$variant),+];
            /// Every variant's string, in declaration order.
            pub const NAMES: [&'static str; [$($word),+].len()] = [$($word),+];

            /// The string this variant is written as (in reports, arguments and output).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $word, )+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            /// Honours width and alignment (`{:<8}`), like a `&str` would.
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $( $word => Ok($name::$variant), )+
                    other => Err(format!(
                        "unknown {} `{other}`: use {}",
                        $what,
                        $crate::one_of(&$name::NAMES)
                    )),
                }
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        #[cfg(feature = "schema")]
        impl ::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ::schemars::json_schema!({ "type": "string", "enum": $name::NAMES })
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Words;
                impl ::serde::de::Visitor<'_> for Words {
                    type Value = $name;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        write!(f, "a {}: {}", $what, $crate::one_of(&$name::NAMES))
                    }
                    fn visit_str<E: ::serde::de::Error>(self, s: &str) -> Result<$name, E> {
                        match s {
                            $( $word => Ok($name::$variant), )+
                            other => Err(E::unknown_variant(other, &$name::NAMES)),
                        }
                    }
                }
                d.deserialize_str(Words)
            }
        }
    };
}

pub mod load;
pub mod machine;
pub mod probe;
pub mod records;
pub mod runner;
pub mod skip;

pub use records::*;

vocabulary! {
    /// How the runtime runs its plugins and tools.
    #[derive(Default)]
    pub enum Mode ("mode") {
        /// Plugins under Landlock; tool commands in bubblewrap + Landlock.
        #[default]
        Confined = "confined",
        /// Explicitly unconfined; protected run and file tools are disabled.
        Diagnostic = "diagnostic",
    }
}

vocabulary! {
    /// Which runtime: the minimal one or full Link. [`Profile::ALL`] is the order the
    /// comparison runs them in; the plugins each runs are `link_protocol::manifest`'s.
    pub enum Profile ("profile") {
        Mini = "mini",
        Link = "link",
    }
}

/// `` `a` ``, `` `a` or `b` ``, `` `a`, `b` or `c` ``.
#[doc(hidden)]
pub fn one_of(words: &[&str]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use std::fmt::Debug;
    use std::str::FromStr;

    /// Every variant writes its legacy string through serde, `Display` and `as_str`, and reads
    /// back from it; anything else is refused.
    fn round_trips<T>(all: &[T], legacy: &[&str])
    where
        T: Copy + Debug + PartialEq + Serialize + DeserializeOwned + FromStr + std::fmt::Display,
        <T as FromStr>::Err: Debug,
    {
        assert_eq!(all.len(), legacy.len());
        for (v, word) in all.iter().zip(legacy) {
            let json = serde_json::to_string(v).unwrap();
            assert_eq!(json, format!("\"{word}\""));
            assert_eq!(serde_json::from_str::<T>(&json).unwrap(), *v);
            assert_eq!(v.to_string(), *word);
            assert_eq!(format!("{v:<12}|"), format!("{word:<12}|"));
            assert_eq!(word.parse::<T>().unwrap(), *v);
        }
        assert!(serde_json::from_str::<T>("\"Nope\"").is_err());
        assert!(serde_json::from_str::<T>("1").is_err());
        assert!("Nope".parse::<T>().is_err());
    }

    #[test]
    fn mode_words() {
        round_trips(&Mode::ALL, &["confined", "diagnostic"]);
        assert_eq!(Mode::default(), Mode::Confined);
        assert_eq!(Mode::Diagnostic.as_str(), "diagnostic");
        assert_eq!(
            "x".parse::<Mode>().unwrap_err(),
            "unknown mode `x`: use `confined` or `diagnostic`"
        );
    }

    #[test]
    fn profile_words() {
        round_trips(&Profile::ALL, &["mini", "link"]);
        assert_eq!(
            "x".parse::<Profile>().unwrap_err(),
            "unknown profile `x`: use `mini` or `link`"
        );
    }

    #[test]
    fn status_words() {
        round_trips(&Status::ALL, &["passed", "failed", "skipped"]);
        assert_eq!(Status::default(), Status::Failed);
        let outcome: CheckOutcome = Status::Skipped;
        assert_eq!(outcome, Status::Skipped);
    }

    #[test]
    fn phase_names_and_what_counts_in_totals() {
        assert_eq!(PhaseName::ALL.len(), 13);
        assert!(PhaseName::RefusedWrite.link_only() && !PhaseName::Refusals.link_only());
        assert_eq!(PhaseName::HostExit.as_str(), "host_exit");
        assert_eq!(PhaseName::HostExit.within(), Some(PhaseName::Shutdown));
        assert!(PhaseName::Idle.fixed_wait() && PhaseName::Idle.within().is_none());
        assert!(PhaseName::in_total("shutdown") && PhaseName::is_work("shutdown"));
        assert!(!PhaseName::in_total("host_exit") && !PhaseName::is_work("host_exit"));
        assert!(PhaseName::in_total("idle") && !PhaseName::is_work("idle"));
        // A phase an older or newer runner wrote counts as work.
        assert!(PhaseName::in_total("warmup") && PhaseName::is_work("warmup"));
    }

    #[test]
    fn check_names() {
        round_trips(
            &CheckName::ALL,
            &[
                "startup",
                "cold_turn",
                "warm_turn",
                "agent_files_isolated",
                "unauthenticated_refused",
                "conversation_write_refused",
                "run_tool_confined",
                "file_tool_confined",
                "scheduler_fired",
                "idle_samples_completed",
                "status_series",
                "processes_stopped",
                "no_orphans",
            ],
        );
        assert_eq!(CheckName::ALL.len(), 13);
        assert!(CheckName::NoOrphans == "no_orphans");
        assert!(CheckName::ColdTurn != "warm_turn");
        let err = "cold".parse::<CheckName>().unwrap_err();
        assert!(
            err.starts_with("unknown check `cold`: use `startup`, `cold_turn`,"),
            "{err}"
        );
        assert!(
            err.ends_with(", `processes_stopped` or `no_orphans`"),
            "{err}"
        );
    }

    #[test]
    fn one_of_lists_words() {
        assert_eq!(one_of(&[]), "");
        assert_eq!(one_of(&["a"]), "`a`");
        assert_eq!(one_of(&["a", "b", "c"]), "`a`, `b` or `c`");
    }
}
