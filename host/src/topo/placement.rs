//! Where the ranks of a run go (the CLI's `--devices`): a list of device indices, or `all`.
//! Rank `r` goes to the list's entry `r mod len` (`all`: device `r mod device_count`), so
//! more ranks than devices share them round-robin and `--devices all` with as many ranks as
//! devices puts one rank on each.

use std::fmt;

/// A rank placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Rank `r` on `list[r % list.len()]`.
    List(Vec<usize>),
    /// Rank `r` on device `r % device_count`.
    All,
}

impl Default for Placement {
    /// Every rank on device 0.
    fn default() -> Self {
        Placement::List(vec![0])
    }
}

impl Placement {
    /// `all`, or indices and ranges separated by commas: `0`, `0,2,4`, `0-3`, `4-7,0-3`.
    pub fn parse(s: &str) -> Result<Placement, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("all") {
            return Ok(Placement::All);
        }
        let mut list = Vec::new();
        for part in s.split(',').map(str::trim) {
            let num = |t: &str| {
                t.trim().parse::<usize>().map_err(|_| {
                    format!(
                        "bad device {t:?} in {s:?} (expected `all`, or indices and ranges like 0,2 or 0-3)"
                    )
                })
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(format!("bad device range {part:?} (start after end)"));
                    }
                    list.extend(a..=b);
                }
                None => list.push(num(part)?),
            }
        }
        if list.is_empty() {
            return Err("no devices given".into());
        }
        Ok(Placement::List(list))
    }

    /// The device of each of `nranks` ranks on a backend of `count` devices; an error names
    /// a listed device that does not exist.
    pub fn devices(&self, nranks: usize, count: usize) -> Result<Vec<usize>, String> {
        match self {
            Placement::All if count == 0 => Err("no devices available".into()),
            Placement::All => Ok((0..nranks).map(|r| r % count).collect()),
            Placement::List(l) => {
                if let Some(&d) = l.iter().find(|&&d| d >= count) {
                    return Err(format!("device {d} does not exist ({count} available)"));
                }
                Ok((0..nranks).map(|r| l[r % l.len()]).collect())
            }
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::All => f.write_str("all"),
            Placement::List(l) => {
                let s: Vec<String> = l.iter().map(|d| d.to_string()).collect();
                f.write_str(&s.join(","))
            }
        }
    }
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Placement::parse(s)
    }
}

/// How `devices` (one per rank) read in a header: `8 ranks on devices 0,1,...,7 (one per
/// device)`, `4 ranks sharing device 0`, `16 ranks on devices 0..7 (2 per device)`.
pub fn describe_ranks(devices: &[usize]) -> String {
    let n = devices.len();
    let mut distinct: Vec<usize> = devices.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() == 1 {
        return if n == 1 {
            format!("1 rank on device {}", distinct[0])
        } else {
            format!("{n} ranks sharing device {}", distinct[0])
        };
    }
    let list: Vec<String> = distinct.iter().map(|d| d.to_string()).collect();
    let most = distinct
        .iter()
        .map(|d| devices.iter().filter(|x| *x == d).count())
        .max()
        .unwrap_or(1);
    let per = if most == 1 {
        "one per device".to_string()
    } else {
        format!("up to {most} per device")
    };
    format!("{n} ranks on devices {} ({per})", list.join(","))
}

/// `rank 3`, `ranks 0,2,4`, or `no rank` for an empty list.
pub fn ranks_label(ranks: &[u32]) -> String {
    match ranks {
        [] => "no rank".into(),
        [r] => format!("rank {r}"),
        _ => {
            let v: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
            format!("ranks {}", v.join(","))
        }
    }
}
