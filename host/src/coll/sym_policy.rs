//! How a rank chooses its symmetric kernels: `OXCCL_SYM`, `OXCCL_SYM_CTAS`,
//! `OXCCL_SYM_PDL` and `OXCCL_SYM_GROUPED`, read once into the [`crate::Config`] a communicator is made with (as NCCL
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

/// When the grouped mailbox kernels run (`OXCCL_SYM_GROUPED`;
/// `oxccl_device::abi::sym_grouped_kernel_runs` says which launches they hold).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Grouped {
    /// Where they measured faster (`crate::coll::sym_table::grouped`).
    #[default]
    Auto,
    /// For every launch they hold, whatever the rank count and size.
    On,
    /// Never.
    Off,
}

impl Grouped {
    /// Every setting.
    pub const ALL: [Grouped; 3] = [Grouped::Auto, Grouped::On, Grouped::Off];

    /// The value of `OXCCL_SYM_GROUPED` that selects it (`1` and `0` also parse).
    pub const fn name(self) -> &'static str {
        match self {
            Grouped::Auto => "auto",
            Grouped::On => "on",
            Grouped::Off => "off",
        }
    }

    /// The setting named `s` (case and surrounding blanks ignored; empty = `auto`; `1` =
    /// `on`, `0` = `off`), or what the valid names are.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Grouped::Auto),
            "on" | "1" => Ok(Grouped::On),
            "off" | "0" => Ok(Grouped::Off),
            other => Err(format!("`{other}` is not one of auto, on (1), off (0)")),
        }
    }
}

impl fmt::Display for Grouped {
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
    /// `OXCCL_SYM_GROUPED`: when the grouped mailbox kernels run. Ranks may differ here:
    /// the grouped and the ungrouped kernels of one op meet, and the grid is the same.
    pub grouped: Grouped,
}

impl Default for SymPolicy {
    fn default() -> Self {
        SymPolicy {
            setting: SymSetting::Auto,
            ctas: 0,
            pdl: true,
            grouped: Grouped::Auto,
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

    #[test]
    fn grouped_names_parse_back_and_others_are_refused() {
        for g in Grouped::ALL {
            assert_eq!(Grouped::parse(&format!(" {} ", g.name().to_uppercase())), Ok(g));
        }
        assert_eq!(Grouped::parse(""), Ok(Grouped::Auto));
        assert_eq!(Grouped::parse("1"), Ok(Grouped::On));
        assert_eq!(Grouped::parse("0"), Ok(Grouped::Off));
        let e = Grouped::parse("yes").unwrap_err();
        assert!(e.contains("`yes`") && e.contains("auto"), "{e}");
    }
}
