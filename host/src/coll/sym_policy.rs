//! How a rank chooses its symmetric kernels: `OXCCL_SYM`, `OXCCL_SYM_CTAS` and
//! `OXCCL_SYM_PDL`, read once into the [`crate::Config`] a communicator is made with (as NCCL
//! reads its parameters), parsed when the communicator is made, and changeable per rank with
//! [`crate::Comm::set_sym_policy`]. Nothing on the launch path reads the environment: a
//! `getenv` there would cost every call a scan of the environment and could race a `setenv`
//! of another thread of the process (C's environment has no lock).

use std::fmt;

/// The kernel family `OXCCL_SYM` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SymSetting {
    /// The measured table (`crate::coll::sym_table`).
    #[default]
    Auto,
    /// Never the symmetric kernels: collectives on windows run the classic ones.
    Off,
    /// Simple, one-shot up to `crate::coll::sym::ONE_SHOT_MAX`, two-shot beyond.
    Simple,
    SimpleOneShot,
    SimpleTwoShot,
    /// LL mailboxes (the all-reduce one-shot).
    Ll,
    /// Lamport mailboxes (the all-reduce one-shot).
    Lamport,
    /// LL, the all-reduce two-shot.
    LlTwoShot,
    /// Lamport, the all-reduce two-shot.
    LamportTwoShot,
}

impl SymSetting {
    /// Every setting, in the order the settings table lists them.
    pub const ALL: [SymSetting; 9] = [
        SymSetting::Auto,
        SymSetting::Off,
        SymSetting::Simple,
        SymSetting::SimpleOneShot,
        SymSetting::SimpleTwoShot,
        SymSetting::Ll,
        SymSetting::Lamport,
        SymSetting::LlTwoShot,
        SymSetting::LamportTwoShot,
    ];

    /// The value of `OXCCL_SYM` that selects it.
    pub const fn name(self) -> &'static str {
        match self {
            SymSetting::Auto => "auto",
            SymSetting::Off => "off",
            SymSetting::Simple => "simple",
            SymSetting::SimpleOneShot => "simple-oneshot",
            SymSetting::SimpleTwoShot => "simple-twoshot",
            SymSetting::Ll => "ll",
            SymSetting::Lamport => "lamport",
            SymSetting::LlTwoShot => "ll-twoshot",
            SymSetting::LamportTwoShot => "lamport-twoshot",
        }
    }

    /// The setting named `s` (case and surrounding blanks ignored; empty = `auto`), or what
    /// the valid names are.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim().to_ascii_lowercase();
        if s.is_empty() {
            return Ok(SymSetting::Auto);
        }
        Self::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
            format!("`{s}` is not one of {}", names.join(", "))
        })
    }
}

impl std::str::FromStr for SymSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

impl fmt::Display for SymSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A rank's symmetric-kernel settings. Every rank of a communicator must use the same ones
/// (the kernel and its grid must match across ranks; ranks that differ report a mismatch
/// naming each other, or time out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymPolicy {
    /// `OXCCL_SYM`.
    pub setting: SymSetting,
    /// `OXCCL_SYM_CTAS`: CTAs per rank of every launch (0 = the measured table).
    pub ctas: u32,
    /// `OXCCL_SYM_PDL`: programmatic dependent launch for small grids on the GPU.
    pub pdl: bool,
}

impl Default for SymPolicy {
    fn default() -> Self {
        SymPolicy {
            setting: SymSetting::Auto,
            ctas: 0,
            pdl: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_others_are_refused() {
        for k in SymSetting::ALL {
            assert_eq!(SymSetting::parse(k.name()), Ok(k));
            assert_eq!(
                SymSetting::parse(&format!(" {} ", k.name().to_uppercase())),
                Ok(k)
            );
        }
        assert_eq!(SymSetting::parse(""), Ok(SymSetting::Auto));
        let e = SymSetting::parse("lamprot").unwrap_err();
        assert!(e.contains("`lamprot`") && e.contains("lamport-twoshot"), "{e}");
    }
}
