//! [`UniqueId`]: the 128 opaque bytes (like `ncclUniqueId`) that one process creates and ships
//! to every rank out of band.
//!
//! Layout (little-endian):
//!
//! ```text
//!  0 magic u32 = "OXID" | 4 version u16 = 1 | 6 zero u16
//!  8 secret [u8; 16]    (random, from the OS-seeded CSPRNG)
//! 24 root address [u8; 24] (wire::encode_addr: family, port, scope id, ip)
//! 48 zero [u8; 80]
//! ```

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use rand::Rng;

use super::error::{BootstrapError, Result};
use super::root::{self, Root};
use super::wire;
use super::Config;

/// Size of a unique id, as `ncclUniqueId`.
pub const UNIQUE_ID_BYTES: usize = 128;
const ID_MAGIC: u32 = u32::from_le_bytes(*b"OXID");
const ID_VERSION: u16 = 1;

/// The bootstrap handle every rank passes to [`super::Bootstrap::init`]. Holds the root's
/// address and the job's secret; `Debug` does not print the secret.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct UniqueId {
    internal: [u8; UNIQUE_ID_BYTES],
}

const _: () = assert!(std::mem::size_of::<UniqueId>() == UNIQUE_ID_BYTES);

impl UniqueId {
    /// Starts a root listener on `bind` (else on the address [`Config::from_env`] selects) and
    /// returns the id with the [`Root`] that owns the listener thread. Keep the `Root` alive
    /// until the rendezvous completed ([`Root::wait`]); dropping it stops the listener.
    pub fn new(bind: Option<IpAddr>) -> Result<(UniqueId, Root)> {
        Self::with_config(bind, &Config::from_env()?)
    }

    /// As [`UniqueId::new`] with an explicit configuration (timeout, interface filter).
    pub fn with_config(bind: Option<IpAddr>, config: &Config) -> Result<(UniqueId, Root)> {
        let ip = match bind {
            Some(ip) => ip,
            None => super::net::select_address(config.ifname.as_deref())?.1,
        };
        let secret: [u8; 16] = rand::rng().random();
        let root = root::start(ip, secret, config.timeout)?;
        Ok((Self::from_parts(root.addr(), secret), root))
    }

    pub(crate) fn from_parts(root: SocketAddr, secret: [u8; 16]) -> Self {
        let mut b = [0u8; UNIQUE_ID_BYTES];
        b[0..4].copy_from_slice(&ID_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&ID_VERSION.to_le_bytes());
        b[8..24].copy_from_slice(&secret);
        b[24..48].copy_from_slice(&wire::encode_addr(root));
        Self { internal: b }
    }

    /// The 128 bytes to ship to the other ranks.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        self.internal
    }

    /// Parses bytes from [`UniqueId::to_bytes`]; checks length, magic, version and address.
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        let bad = |what: String| BootstrapError::InvalidId { what };
        let b: [u8; UNIQUE_ID_BYTES] = bytes
            .try_into()
            .map_err(|_| bad(format!("{} bytes, expected {UNIQUE_ID_BYTES}", bytes.len())))?;
        let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
        let version = u16::from_le_bytes([b[4], b[5]]);
        if magic != ID_MAGIC {
            return Err(bad(format!("magic {magic:#010x} is not an oxccl unique id")));
        }
        if version != ID_VERSION {
            return Err(bad(format!(
                "version {version}, this build reads version {ID_VERSION}"
            )));
        }
        if b[6..8] != [0, 0] || b[48..].iter().any(|&x| x != 0) {
            return Err(bad("reserved bytes are not zero".into()));
        }
        let addr = wire::decode_addr(&b[24..48]).map_err(|e| bad(format!("root address: {e}")))?;
        if addr.port() == 0 || addr.ip().is_unspecified() {
            return Err(bad(format!("root address {addr} is not connectable")));
        }
        Ok(Self { internal: b })
    }

    /// The root's listening address.
    pub fn root_addr(&self) -> SocketAddr {
        wire::decode_addr(&self.internal[24..48]).expect("validated at construction")
    }

    pub(crate) fn secret(&self) -> [u8; 16] {
        self.internal[8..24].try_into().unwrap()
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UniqueId")
            .field("root", &self.root_addr())
            .field("secret", &"<redacted>")
            .finish()
    }
}
