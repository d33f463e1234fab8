//! Line formats of the LL and Lamport mailboxes: how payload bytes become 16-byte lines,
//! how a reader tells a complete line of the current op from anything else, and what a
//! reader leaves behind.
//!
//! Words are the four little-endian `u32` of a line; payload words are the line's data in
//! memory order (`d0` = bytes 0..4 of the chunk).
//!
//! # LL ([`Ll`]): 8 data bytes, the op's tag twice
//! ```text
//! | d0 | tag | d1 | tag |      tag = sym_ll_tag(seq): odd, never 0
//! ```
//! The line format of [`crate::prims::ll`] (written by its `put`, read by its `try_get`).
//! Complete iff both tag words equal this op's tag: each 8-byte half carries its own tag,
//! so a half that has not landed yet still shows an older tag (or the 0 of fresh memory).
//! Nothing is written back after reading.
//!
//! # Lamport, full lines ([`LamportFull`]): 16 data bytes, floats only
//! The sentinel is one 32-bit word, [`SENTINEL`] `= 0xFFFA_FFFA`; a poisoned line is four
//! of them ([`POISON`]). Per data type:
//! - `f32`: the sentinel word is the NaN `0xFFFA_FFFA` (sign set, quiet, payload `0x3AFFFA`).
//!   A real input lane with exactly these bits is replaced by the canonical NaN
//!   `0x7FC0_0000` before it is sent. A line is complete iff none of its 4 words is the
//!   sentinel.
//! - `f16`: lane sentinel `0xFFFA` (a NaN: exponent all ones, mantissa `0x3FA`); the word
//!   sentinel is two of them. Lanes equal to `0xFFFA` are replaced by the canonical NaN
//!   `0x7E00`, so no data word can be the sentinel; complete iff no word is the sentinel.
//! - `bf16`: lane sentinel `0xFFFA` (a NaN: exponent `0xFF`, mantissa `0x7A`), replaced by
//!   `0x7FC0`; as `f16` otherwise.
//! - `f64`: any lane whose upper word is `0xFFFA_FFFA` is a NaN (exponent `0x7FF`, mantissa
//!   non-zero) and is replaced by the canonical NaN `0x7FF8_0000_0000_0000`; complete iff
//!   neither lane's upper word is the sentinel. (Lower words may hold any bits; this relies
//!   on each 8-byte lane landing whole, as LL does.)
//!
//! Replacing one NaN by another keeps every result of every operator (a NaN in, a NaN
//! out; `Min`/`Max` treat every NaN alike), so the all-reduce and the reduce-scatter are
//! exact; the all-gather delivers that one NaN payload as the canonical NaN (documented
//! deviation from a bit copy, for one bit pattern per type). Results are canonicalized too
//! where a kernel sends them (the two-shot all-reduce sends the reduced blocks): a reduction
//! of canonical inputs can still produce the pattern (a signalling NaN input such as
//! `0xFFBA_FFFA` quieted by an add), and the owner stores the same canonical bits into its
//! own output, so every rank ends with the same bits.
//! Padding lanes past the end of the payload are 0, never the sentinel.
//!
//! # Lamport, split lines ([`LamportSplit`]): 8 data bytes and a constant tag
//! Integers (`i8`, `u8`, `i32`, `u32`, `i64`, `u64`) and the 8-bit floats (`f8e4m3`,
//! `f8e5m2`, whose NaN patterns are also valid data in 4-lane words) have no bit pattern
//! data cannot hold, so the data never shares a word with the sentinel:
//! ```text
//! | d0 | TAG | d1 | TAG |      TAG = LAMPORT_TAG = 0x4C41_4D50 ("LAMP"), != SENTINEL
//! ```
//! Complete iff both tag words equal `TAG` (a poisoned line holds the sentinel there, fresh
//! zeroed memory holds 0: neither is taken for data, so a forgotten init shows up as a
//! timeout rather than as zeros). Data of any bits, the sentinel's included, is carried
//! unchanged.
//!
//! # Header lines
//! The last line of every slot carries the op's fingerprint from global thread 0 of the
//! writer to global thread 0 of the reader ([`LineProto::encode_header`]): LL in the LL
//! format, Lamport in the split format whatever the data type (its payload halves are below
//! `0x1000`, so no format's sentinel can appear). Lamport readers poison it after reading,
//! like any line.
//!
//! # Reuse and what is left behind
//! LL readers leave lines as they are (the tag of a later op differs). Lamport readers store
//! [`POISON`] into every line they consumed, right after reading it (see the invariant in
//! [`super`]).

use core::marker::PhantomData;

use crate::abi::{sym_lamport_buffer, sym_line_data, sym_ll_parity, sym_ll_tag, DataType, SYM_PROTO_LAMPORT};
use crate::arch;
use crate::ops::Elem;
use crate::prims::ll;

/// The Lamport sentinel word.
pub const SENTINEL: u32 = 0xFFFA_FFFA;

/// A poisoned line.
pub const POISON: [u32; 4] = [SENTINEL; 4];

/// The tag word of split Lamport lines.
pub const LAMPORT_TAG: u32 = 0x4C41_4D50;

/// A mailbox protocol: line format, buffer choice, and what a reader leaves behind.
pub trait LineProto: Copy {
    /// Payload bytes per line (16 or 8).
    const DATA: u64;
    /// The buffer of the area this op uses.
    fn buffer(&self) -> u64;
    /// The payload words `d` as every rank must see them (a rank's own share goes through
    /// this too, so that all ranks combine the same bits): identity but for full Lamport
    /// lines, which replace the sentinel lanes.
    #[inline(always)]
    fn canon(&self, d: [u32; 4]) -> [u32; 4] {
        d
    }
    /// The line carrying payload words `d` (the first `DATA / 4` of them; already
    /// [`LineProto::canon`]).
    fn encode(&self, d: [u32; 4]) -> [u32; 4];
    /// The payload of line `l` if it is a complete line of this op.
    fn decode(&self, l: [u32; 4]) -> Option<[u32; 4]>;
    /// The slot's header line carrying payload words `w` ([`crate::abi::sym_header_words`]:
    /// words 0 and 1 matter). One format for every data type of the protocol, so that ranks
    /// that disagree on the type still read each other's header: LL lines as for data (the
    /// op's tag), Lamport split lines for both Lamport formats.
    #[inline(always)]
    fn encode_header(&self, w: [u32; 4]) -> [u32; 4] {
        self.encode(w)
    }
    /// Words 0 and 1 of header line `l` if it is a complete header line of this op.
    #[inline(always)]
    fn decode_header(&self, l: [u32; 4]) -> Option<[u32; 4]> {
        self.decode(l)
    }
    /// After reading line `p` of this rank's own mailbox.
    ///
    /// # Safety
    /// `p` must be a valid, 16-byte aligned line of this rank's mailbox, read by this thread
    /// only.
    unsafe fn consumed(&self, p: *mut [u32; 4]);
}

/// The LL protocol of one op.
#[derive(Clone, Copy, Debug)]
pub struct Ll {
    pub tag: u32,
    pub parity: u64,
}

impl Ll {
    /// The LL protocol of op `seq`.
    pub const fn of(seq: u64) -> Self {
        Ll {
            tag: sym_ll_tag(seq),
            parity: sym_ll_parity(seq),
        }
    }
}

impl LineProto for Ll {
    const DATA: u64 = 8;
    #[inline(always)]
    fn buffer(&self) -> u64 {
        self.parity
    }
    #[inline(always)]
    fn encode(&self, d: [u32; 4]) -> [u32; 4] {
        [d[0], self.tag, d[1], self.tag]
    }
    #[inline(always)]
    fn decode(&self, l: [u32; 4]) -> Option<[u32; 4]> {
        (l[1] == self.tag && l[3] == self.tag).then_some([l[0], l[2], 0, 0])
    }
    #[inline(always)]
    unsafe fn consumed(&self, _p: *mut [u32; 4]) {}
}

/// Lamport with split lines (integers and 8-bit floats).
#[derive(Clone, Copy, Debug)]
pub struct LamportSplit {
    pub buffer: u64,
}

impl LamportSplit {
    /// The protocol of op `seq`.
    pub const fn of(seq: u64) -> Self {
        LamportSplit {
            buffer: sym_lamport_buffer(seq),
        }
    }
}

impl LineProto for LamportSplit {
    const DATA: u64 = 8;
    #[inline(always)]
    fn buffer(&self) -> u64 {
        self.buffer
    }
    #[inline(always)]
    fn encode(&self, d: [u32; 4]) -> [u32; 4] {
        [d[0], LAMPORT_TAG, d[1], LAMPORT_TAG]
    }
    #[inline(always)]
    fn decode(&self, l: [u32; 4]) -> Option<[u32; 4]> {
        (l[1] == LAMPORT_TAG && l[3] == LAMPORT_TAG).then_some([l[0], l[2], 0, 0])
    }
    #[inline(always)]
    unsafe fn consumed(&self, p: *mut [u32; 4]) {
        arch::store_v4_volatile(p, POISON);
    }
}

/// Lamport with full lines (`f16`, `bf16`, `f32`, `f64`).
#[derive(Clone, Copy, Debug)]
pub struct LamportFull<T> {
    pub buffer: u64,
    _t: PhantomData<T>,
}

impl<T> LamportFull<T> {
    /// The protocol of op `seq`.
    pub const fn of(seq: u64) -> Self {
        LamportFull {
            buffer: sym_lamport_buffer(seq),
            _t: PhantomData,
        }
    }
}

/// Whether `T` uses full Lamport lines (the float types with a free NaN pattern).
#[inline(always)]
pub const fn lamport_full<T: Elem>() -> bool {
    sym_line_data(SYM_PROTO_LAMPORT, T::DTYPE) == 16
}

/// Replace a 16-bit lane equal to `0xFFFA` by `canon`.
#[inline(always)]
fn canon_halves(w: u32, canon: u32) -> u32 {
    let lo = if w & 0xFFFF == 0xFFFA { canon } else { w & 0xFFFF };
    let hi = if w >> 16 == 0xFFFA { canon } else { w >> 16 };
    lo | hi << 16
}

/// Payload words `d` of element type `T` with every lane equal to the lane sentinel
/// replaced by `T`'s canonical NaN (see the module doc).
#[inline(always)]
pub fn canonicalize<T: Elem>(d: [u32; 4]) -> [u32; 4] {
    match T::DTYPE {
        DataType::F32 => d.map(|w| if w == SENTINEL { 0x7FC0_0000 } else { w }),
        DataType::F16 => d.map(|w| canon_halves(w, 0x7E00)),
        DataType::Bf16 => d.map(|w| canon_halves(w, 0x7FC0)),
        DataType::F64 => {
            let mut o = d;
            if o[1] == SENTINEL {
                o[0] = 0;
                o[1] = 0x7FF8_0000;
            }
            if o[3] == SENTINEL {
                o[2] = 0;
                o[3] = 0x7FF8_0000;
            }
            o
        }
        _ => d,
    }
}

impl<T: Elem> LineProto for LamportFull<T> {
    const DATA: u64 = 16;
    #[inline(always)]
    fn encode_header(&self, w: [u32; 4]) -> [u32; 4] {
        LamportSplit { buffer: self.buffer }.encode(w)
    }
    #[inline(always)]
    fn decode_header(&self, l: [u32; 4]) -> Option<[u32; 4]> {
        LamportSplit { buffer: self.buffer }.decode(l)
    }
    #[inline(always)]
    fn buffer(&self) -> u64 {
        self.buffer
    }
    #[inline(always)]
    fn canon(&self, d: [u32; 4]) -> [u32; 4] {
        canonicalize::<T>(d)
    }
    #[inline(always)]
    fn encode(&self, d: [u32; 4]) -> [u32; 4] {
        d
    }
    #[inline(always)]
    fn decode(&self, l: [u32; 4]) -> Option<[u32; 4]> {
        let ready = if matches!(T::DTYPE, DataType::F64) {
            l[1] != SENTINEL && l[3] != SENTINEL
        } else {
            l[0] != SENTINEL && l[1] != SENTINEL && l[2] != SENTINEL && l[3] != SENTINEL
        };
        ready.then_some(l)
    }
    #[inline(always)]
    unsafe fn consumed(&self, p: *mut [u32; 4]) {
        arch::store_v4_volatile(p, POISON);
    }
}

/// Store LL or Lamport line `l` into a peer's mailbox: one 16-byte volatile store (the
/// [`crate::prims::ll::put`] of LL lines).
///
/// # Safety
/// `p` must be a valid, 16-byte aligned mailbox line that only this thread writes in this
/// op.
#[inline(always)]
pub unsafe fn put_line(p: *mut [u32; 4], l: [u32; 4]) {
    arch::store_v4_volatile(p, l);
}

const _: () = {
    // LL lines here are exactly prims::ll lines: same words, same tag placement.
    assert!(ll::LINE_BYTES == 16 && ll::LINE_DATA == 8);
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Bf16, F16};

    #[test]
    fn sentinel_patterns_are_nans_of_every_full_type() {
        assert!(f32::from_bits(SENTINEL).is_nan());
        assert!(f64::from_bits((SENTINEL as u64) << 32).is_nan());
        assert!(half::f16::from_bits(0xFFFA).is_nan());
        assert!(half::bf16::from_bits(0xFFFA).is_nan());
        assert!(f32::from_bits(0x7FC0_0000).is_nan() && half::f16::from_bits(0x7E00).is_nan());
    }

    #[test]
    fn canonicalized_data_never_looks_poisoned() {
        let p = LamportFull::<f32>::of(0);
        assert_eq!(p.decode(POISON), None);
        let d = [SENTINEL, 1, SENTINEL, 2];
        assert_eq!(
            p.decode(p.encode(p.canon(d))),
            Some([0x7FC0_0000, 1, 0x7FC0_0000, 2])
        );
        let h = LamportFull::<F16>::of(0);
        let e = h.encode(h.canon([SENTINEL, 0xFFFA_0001, 0x0001_FFFA, 0]));
        assert_eq!(e, [0x7E00_7E00, 0x7E00_0001, 0x0001_7E00, 0]);
        assert!(h.decode(e).is_some());
        let b = LamportFull::<Bf16>::of(0);
        assert_eq!(b.canon([SENTINEL; 4])[0], 0x7FC0_7FC0);
        let f = LamportFull::<f64>::of(0);
        assert_eq!(f.decode([1, SENTINEL, 2, 3]), None);
        assert_eq!(f.canon([1, SENTINEL, SENTINEL, 3]), [0, 0x7FF8_0000, SENTINEL, 3]);
        assert!(f.decode(f.canon([1, SENTINEL, SENTINEL, 3])).is_some());
    }

    #[test]
    fn split_lines_carry_any_bits_and_reject_poison_and_zero() {
        let p = LamportSplit::of(4);
        assert_eq!(p.buffer, 1);
        assert_eq!(p.decode(POISON), None);
        assert_eq!(p.decode([0; 4]), None);
        assert_eq!(
            p.decode(p.encode([SENTINEL, SENTINEL, 0, 0])),
            Some([SENTINEL, SENTINEL, 0, 0])
        );
    }

    #[test]
    fn ll_lines_are_prims_ll_lines() {
        let p = Ll::of(7);
        let mut line = [[0u32; 4]; 1];
        // SAFETY: a local, aligned line.
        unsafe {
            ll::put(line.as_mut_ptr(), 0x1122_3344_5566_7788, p.tag);
            assert_eq!(p.decode(line[0]), Some([0x5566_7788, 0x1122_3344, 0, 0]));
            assert_eq!(ll::try_get(line.as_ptr(), p.tag), Some(0x1122_3344_5566_7788));
        }
        assert_eq!(Ll::of(8).decode(line[0]), None);
    }
}
