//! What each rank publishes when it registers a window, and the flat layout every rank
//! computes from all of it (pure: no I/O, unit-tested below).
//!
//! # Pieces
//! A rank's window is a list of *parts*, each inside one `mem_alloc` block (a segment that
//! spans several blocks is cut at their boundaries). Each part is mapped through one
//! *piece*: the granularity-aligned range of its block around it (`[floor(off, g),
//! ceil(off + len, g))`), or the whole block where the backend maps only whole allocations
//! (the GPU). `lead` is the offset of window byte 0 inside the first piece.
//!
//! # Slots
//! Rank `q`'s pieces are mapped one after another into its slot `[q * stride, (q + 1) *
//! stride)` of every rank's flat range, starting at slot offset `S_q = L - lead_q`, where
//! `L` is the largest lead: window byte 0 of every rank then sits at slot offset `L`, which is
//! what makes `local + (q - rank) * stride + o` address peer `q`'s byte `o`. `S_q` must be a
//! multiple of the granularity, so the leads must agree modulo it. The stride is the largest
//! `S_q + extent_q` (a multiple of the granularity).
//!
//! # Wire format (little-endian)
//! ```text
//! 0   magic "OXWN" u32      4  status u32 (0 ok, else the rest is a UTF-8 error message)
//! 8   process token u64     16 size u64 (window bytes of this rank)
//! 24  lead u64              32 granularity u64
//! 40  flags u32             44 pieces u32
//! 48  per piece: {phys_offset u64, map_len u64, block u64 (its mem_alloc base, owner's
//!     address space)}
//! ```

/// Magic of a registration blob.
const MAGIC: u32 = u32::from_le_bytes(*b"OXWN");
const HEAD: usize = 48;
const PIECE: usize = 24;

/// One piece of a rank's window as published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PieceInfo {
    /// Offset of the piece inside its block's physical memory.
    pub phys_offset: u64,
    /// Bytes mapped.
    pub map_len: u64,
    /// Base address of the block (in its owner's process).
    pub block: u64,
}

/// What a rank publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RankInfo {
    pub process: u64,
    pub size: u64,
    pub lead: u64,
    pub granularity: u64,
    pub flags: u32,
    pub pieces: Vec<PieceInfo>,
}

impl RankInfo {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEAD + PIECE * self.pieces.len());
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for v in [self.process, self.size, self.lead, self.granularity] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&(self.pieces.len() as u32).to_le_bytes());
        for p in &self.pieces {
            for v in [p.phys_offset, p.map_len, p.block] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        b
    }
}

/// A blob saying this rank failed before it could publish its window.
pub(crate) fn failure_blob(message: &str) -> Vec<u8> {
    let mut b = MAGIC.to_le_bytes().to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(message.as_bytes());
    b
}

/// A peer's blob: its info, or the message of its failure, or what is malformed.
pub(crate) fn parse(b: &[u8]) -> Result<RankInfo, String> {
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|x| u32::from_le_bytes(x.try_into().unwrap_or([0; 4])))
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|x| u64::from_le_bytes(x.try_into().unwrap_or([0; 8])))
    };
    if u32_at(0) != Some(MAGIC) {
        return Err(format!("published {} bytes of a foreign format", b.len()));
    }
    if u32_at(4) != Some(0) {
        return Err(format!(
            "failed: {}",
            String::from_utf8_lossy(&b[8.min(b.len())..])
        ));
    }
    let malformed = || format!("published a malformed {}-byte registration", b.len());
    let n = u32_at(44).ok_or_else(malformed)? as usize;
    if b.len() != HEAD + PIECE * n {
        return Err(malformed());
    }
    let pieces = (0..n)
        .map(|i| {
            let o = HEAD + PIECE * i;
            Some(PieceInfo {
                phys_offset: u64_at(o)?,
                map_len: u64_at(o + 8)?,
                block: u64_at(o + 16)?,
            })
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(malformed)?;
    Ok(RankInfo {
        process: u64_at(8).ok_or_else(malformed)?,
        size: u64_at(16).ok_or_else(malformed)?,
        lead: u64_at(24).ok_or_else(malformed)?,
        granularity: u64_at(32).ok_or_else(malformed)?,
        flags: u32_at(40).ok_or_else(malformed)?,
        pieces,
    })
}

/// The flat layout every rank computes from all ranks' infos.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Flat {
    pub stride: u64,
    /// Slot offset of window byte 0 (the same for every rank).
    pub byte0: u64,
    /// Per rank, the slot offset of each of its pieces.
    pub piece_at: Vec<Vec<u64>>,
}

/// Why the ranks' infos do not make one window: the peer to blame and what is wrong.
pub(crate) type LayoutFault = (u32, String);

/// Lay out the ranks' pieces (see the module doc).
pub(crate) fn flat(infos: &[RankInfo]) -> Result<Flat, LayoutFault> {
    let g = infos.first().map_or(1, |i| i.granularity.max(1));
    let f0 = infos.first().map_or(0, |i| i.flags);
    for (q, i) in infos.iter().enumerate() {
        if i.granularity != g {
            return Err((
                q as u32,
                format!(
                    "its mapping granularity is {} bytes, rank 0's {g} (mixed devices?)",
                    i.granularity
                ),
            ));
        }
        if i.flags != f0 {
            return Err((
                q as u32,
                format!("registered with flags {:#x}, rank 0 with {f0:#x}", i.flags),
            ));
        }
        if let Some(p) = i.pieces.iter().find(|p| p.map_len == 0 || p.map_len % g != 0) {
            return Err((
                q as u32,
                format!("published a piece of {} bytes (granularity {g})", p.map_len),
            ));
        }
    }
    let byte0 = infos.iter().map(|i| i.lead).max().unwrap_or(0);
    let mut stride = 0u64;
    let mut piece_at = Vec::with_capacity(infos.len());
    for (q, i) in infos.iter().enumerate() {
        let start = byte0 - i.lead;
        if start % g != 0 {
            return Err((
                q as u32,
                format!(
                    "its window starts {} bytes into its first mapping unit, another rank's {byte0}: \
                     the buffers must start at the same offset modulo the {g}-byte granularity",
                    i.lead
                ),
            ));
        }
        let mut at = start;
        let mut mine = Vec::with_capacity(i.pieces.len());
        for p in &i.pieces {
            mine.push(at);
            at += p.map_len;
        }
        stride = stride.max(at);
        piece_at.push(mine);
    }
    Ok(Flat {
        stride: stride.max(g).div_ceil(g) * g,
        byte0,
        piece_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(lead: u64, lens: &[u64]) -> RankInfo {
        RankInfo {
            process: 7,
            size: lens.iter().sum::<u64>() - lead,
            lead,
            granularity: 4096,
            flags: 1,
            pieces: lens
                .iter()
                .enumerate()
                .map(|(k, &l)| PieceInfo {
                    phys_offset: 4096 * k as u64,
                    map_len: l,
                    block: 0x1000_0000 + k as u64,
                })
                .collect(),
        }
    }

    #[test]
    fn blobs_round_trip_and_failures_carry_their_message() {
        let i = info(100, &[4096, 8192]);
        assert_eq!(parse(&i.to_bytes()), Ok(i.clone()));
        let e = parse(&failure_blob("no memory")).unwrap_err();
        assert!(e.contains("no memory"), "{e}");
        let mut short = i.to_bytes();
        short.pop();
        assert!(parse(&short).unwrap_err().contains("malformed"));
        assert!(parse(&[1, 2, 3]).unwrap_err().contains("foreign"));
    }

    #[test]
    fn slots_align_byte_zero_and_stride_covers_the_largest_rank() {
        let infos = [
            info(0, &[4096, 8192]),
            info(0, &[4096]),
            info(0, &[16384, 4096, 4096]),
        ];
        let f = flat(&infos).unwrap();
        assert_eq!(f.stride, 24576);
        assert_eq!(f.byte0, 0);
        assert_eq!(f.piece_at[0], vec![0, 4096]);
        assert_eq!(f.piece_at[2], vec![0, 16384, 20480]);
        // Leads equal modulo the granularity (the GPU's whole-block pieces): slots shift.
        let infos = [info(4096 + 64, &[8192]), info(64, &[4096])];
        let f = flat(&infos).unwrap();
        assert_eq!((f.byte0, f.piece_at[1][0], f.stride), (4160, 4096, 8192));
        for (q, i) in infos.iter().enumerate() {
            assert_eq!(f.piece_at[q][0] + i.lead, f.byte0);
        }
    }

    #[test]
    fn disagreeing_ranks_are_named() {
        assert_eq!(flat(&[info(0, &[4096]), info(64, &[4096])]).unwrap_err().0, 0);
        let mut other = info(0, &[4096]);
        other.flags = 0;
        assert_eq!(flat(&[info(0, &[4096]), other]).unwrap_err().0, 1);
        let mut odd = info(0, &[4096]);
        odd.granularity = 2 << 20;
        assert!(flat(&[info(0, &[4096]), odd])
            .unwrap_err()
            .1
            .contains("granularity"));
    }
}
