//! The in-process rendezvous: how the ranks of a communicator made by `Comm::init_all`
//! (every rank in this process, no bootstrap) all-gather small byte blobs on the host, for
//! `Comm::split` and `Comm::finalize`.
//!
//! One [`Rendezvous`] is shared by the ranks of the group. Calls are collective: every rank
//! calls [`Rendezvous::all_gather`] once per round, in the same order, each from its own
//! thread. A round is a generation: the last rank to arrive publishes the blobs, advances the
//! generation and wakes the others. A rank can be at most one round ahead of the slowest
//! waiter (the next round cannot complete without it), so keeping the one last result is
//! enough.
//!
//! Every wait has a deadline and looks at an abort flag every [`abort::POLL`]. The first rank
//! to pass its deadline marks the round failed with the ranks that never arrived; the other
//! waiters of that round report the same ranks, and the rendezvous refuses later rounds (the
//! ranks no longer agree on which round is which).
//!
//! Besides the rounds, a mailbox carries point-to-point messages among some of the ranks
//! (`Comm::shrink`, whose excluded ranks never take part): [`Rendezvous::post`] leaves a
//! message for one rank under a tag, [`Rendezvous::take`] waits for it with a deadline and
//! the abort flags. The mailbox is independent of the rounds (a failed round does not
//! stop it).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::abort::{self, AbortFlag};
use crate::error::{Error, Result};

/// The shared rendezvous of one in-process group.
pub(crate) struct Rendezvous {
    nranks: u32,
    abort: AbortFlag,
    state: Mutex<State>,
    cv: Condvar,
    /// Point-to-point messages by (tag, from, to).
    mail: Mutex<HashMap<(u64, u32, u32), Vec<u8>>>,
    mail_cv: Condvar,
}

struct State {
    /// The round being collected.
    generation: u64,
    /// This round's blobs, by rank.
    blobs: Vec<Option<Vec<u8>>>,
    /// The blobs of round `generation - 1`.
    last: Arc<Vec<Vec<u8>>>,
    /// The round that failed, and how.
    failed: Option<(u64, Failure)>,
}

#[derive(Clone, Debug)]
enum Failure {
    /// `op` timed out after `timeout` without these ranks.
    Timeout {
        op: &'static str,
        missing: Vec<u32>,
        timeout: Duration,
    },
    Aborted,
}

impl Rendezvous {
    /// A rendezvous for `nranks` ranks; `abort` is the group's host abort flag.
    pub fn new(nranks: u32, abort: AbortFlag) -> Self {
        Rendezvous {
            nranks,
            abort,
            state: Mutex::new(State {
                generation: 0,
                blobs: vec![None; nranks as usize],
                last: Arc::default(),
                failed: None,
            }),
            cv: Condvar::new(),
            mail: Mutex::default(),
            mail_cv: Condvar::new(),
        }
    }

    /// Leave `blob` for rank `to` under `tag` (from rank `from`).
    pub fn post(&self, from: u32, to: u32, tag: u64, blob: &[u8]) -> Result<()> {
        if to >= self.nranks {
            return Err(Error::InvalidArgument {
                op: "rendezvous post",
                rank: from,
                what: format!("peer {to} is not below nranks {}", self.nranks),
            });
        }
        let mut m = self.mail.lock().unwrap_or_else(|p| p.into_inner());
        m.insert((tag, from, to), blob.to_vec());
        self.mail_cv.notify_all();
        Ok(())
    }

    /// The message rank `from` left for rank `to` under `tag`, waiting until `deadline`
    /// ([`Error::ControlTimeout`] naming `from`; `timeout` is what the message reports)
    /// unless `abort` or the group's flag is raised ([`Error::Aborted`]).
    #[allow(clippy::too_many_arguments)]
    pub fn take(
        &self,
        op: &'static str,
        to: u32,
        from: u32,
        tag: u64,
        deadline: Instant,
        timeout: Duration,
        abort: &AbortFlag,
    ) -> Result<Vec<u8>> {
        let mut m = self.mail.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(b) = m.remove(&(tag, from, to)) {
                return Ok(b);
            }
            if abort.is_raised() || self.abort.is_raised() {
                return Err(Error::Aborted { op, rank: to });
            }
            let rest = deadline.saturating_duration_since(Instant::now());
            if rest.is_zero() {
                tracing::warn!(target: "oxccl::init", op, rank = to, peer = from, "host message timed out");
                return Err(Error::ControlTimeout {
                    op,
                    rank: to,
                    missing: vec![from],
                    timeout,
                });
            }
            m = self
                .mail_cv
                .wait_timeout(m, rest.min(abort::POLL))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The group's abort flag (raised by `Comm::abort`).
    pub fn abort_flag(&self) -> &AbortFlag {
        &self.abort
    }

    /// Every rank's `blob` of this round, in rank order. `op` and `rank` name the caller in
    /// errors; gives up after `timeout` ([`Error::ControlTimeout`] naming the ranks that did
    /// not arrive) or once `abort` is raised ([`Error::Aborted`]).
    pub fn all_gather(
        &self,
        op: &'static str,
        rank: u32,
        blob: &[u8],
        timeout: Duration,
        abort: &AbortFlag,
    ) -> Result<Vec<Vec<u8>>> {
        if rank >= self.nranks {
            return Err(Error::InvalidArgument {
                op,
                rank,
                what: format!("rank {rank} is not below nranks {}", self.nranks),
            });
        }
        let deadline = Instant::now().checked_add(timeout);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, why)) = &s.failed {
            let how = match why {
                Failure::Timeout {
                    op: first, missing, ..
                } => format!("{first} timed out waiting for ranks {missing:?}"),
                Failure::Aborted => "an exchange was aborted".into(),
            };
            return Err(Error::InvalidArgument {
                op,
                rank,
                what: format!(
                    "the host exchanges among the ranks failed earlier ({how}); the communicator can only be aborted or destroyed"
                ),
            });
        }
        let g = s.generation;
        let slot = &mut s.blobs[rank as usize];
        if slot.is_some() {
            return Err(Error::InvalidArgument {
                op,
                rank,
                what: "this rank is already in the exchange (called from two threads at once)".into(),
            });
        }
        *slot = Some(blob.to_vec());
        if s.blobs.iter().all(Option::is_some) {
            let blobs = std::mem::replace(&mut s.blobs, vec![None; self.nranks as usize]);
            s.last = Arc::new(blobs.into_iter().map(Option::unwrap_or_default).collect());
            s.generation += 1;
            self.cv.notify_all();
            return Ok(s.last.to_vec());
        }
        loop {
            if s.generation > g {
                return Ok(s.last.to_vec());
            }
            if let Some((fg, why)) = &s.failed {
                debug_assert_eq!(*fg, g);
                return Err(match why {
                    Failure::Timeout { missing, timeout, .. } => Error::ControlTimeout {
                        op,
                        rank,
                        missing: missing.clone(),
                        timeout: *timeout,
                    },
                    Failure::Aborted => Error::Aborted { op, rank },
                });
            }
            if abort.is_raised() || self.abort.is_raised() {
                s.failed = Some((g, Failure::Aborted));
                self.cv.notify_all();
                return Err(Error::Aborted { op, rank });
            }
            let now = Instant::now();
            let rest = deadline.map_or(abort::POLL, |d| d.saturating_duration_since(now));
            if rest.is_zero() {
                let missing: Vec<u32> = (0..self.nranks)
                    .filter(|&q| s.blobs[q as usize].is_none())
                    .collect();
                tracing::warn!(target: "oxccl::init", op, rank, ?missing, "host exchange timed out");
                s.failed = Some((
                    g,
                    Failure::Timeout {
                        op,
                        missing: missing.clone(),
                        timeout,
                    },
                ));
                self.cv.notify_all();
                return Err(Error::ControlTimeout {
                    op,
                    rank,
                    missing,
                    timeout,
                });
            }
            s = self
                .cv
                .wait_timeout(s, rest.min(abort::POLL))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl std::fmt::Debug for Rendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("Rendezvous")
            .field("nranks", &self.nranks)
            .field("generation", &s.generation)
            .field("failed", &s.failed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(20);

    fn gather_on(rdv: &Arc<Rendezvous>, ranks: &[u32], timeout: Duration) -> Vec<Result<Vec<Vec<u8>>>> {
        let hs: Vec<_> = ranks
            .iter()
            .map(|&r| {
                let rdv = rdv.clone();
                std::thread::spawn(move || {
                    let flag = rdv.abort_flag().clone();
                    rdv.all_gather("test", r, &[r as u8; 3], timeout, &flag)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn rounds_gather_every_blob_in_rank_order() {
        let rdv = Arc::new(Rendezvous::new(4, AbortFlag::new()));
        for _ in 0..20 {
            for res in gather_on(&rdv, &[3, 1, 0, 2], LONG) {
                let blobs = res.unwrap();
                assert_eq!(blobs, (0..4u8).map(|r| vec![r; 3]).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn missing_rank_times_out_naming_it_then_the_rendezvous_refuses() {
        let rdv = Arc::new(Rendezvous::new(3, AbortFlag::new()));
        let t0 = Instant::now();
        for (i, res) in gather_on(&rdv, &[0, 2], Duration::from_millis(200))
            .into_iter()
            .enumerate()
        {
            match res {
                Err(Error::ControlTimeout { rank, missing, .. }) => {
                    assert_eq!(rank, [0, 2][i]);
                    assert_eq!(missing, vec![1]);
                }
                other => panic!("expected a timeout naming rank 1, got {other:?}"),
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        let flag = AbortFlag::new();
        let late = rdv.all_gather("test", 1, b"", LONG, &flag);
        assert!(
            matches!(late, Err(Error::InvalidArgument { rank: 1, .. })),
            "{late:?}"
        );
    }

    #[test]
    fn abort_unblocks_waiters_quickly() {
        let group = AbortFlag::new();
        let rdv = Arc::new(Rendezvous::new(3, group.clone()));
        let r2 = rdv.clone();
        let waiters = std::thread::spawn(move || gather_on(&r2, &[0, 1], LONG));
        std::thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        group.raise();
        for res in waiters.join().unwrap() {
            assert!(matches!(res, Err(Error::Aborted { op: "test", .. })), "{res:?}");
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_callers_own_flag_aborts_its_wait() {
        let rdv = Rendezvous::new(2, AbortFlag::new());
        let mine = AbortFlag::new();
        mine.raise();
        let res = rdv.all_gather("test", 0, b"x", LONG, &mine);
        assert!(matches!(res, Err(Error::Aborted { rank: 0, .. })), "{res:?}");
        assert!(!rdv.abort_flag().is_raised());
    }

    #[test]
    fn mailbox_passes_messages_times_out_naming_the_sender_and_aborts() {
        let rdv = Arc::new(Rendezvous::new(3, AbortFlag::new()));
        let flag = AbortFlag::new();
        let r2 = rdv.clone();
        let waiter = std::thread::spawn(move || {
            let f = AbortFlag::new();
            r2.take("test", 2, 0, 7, Instant::now() + LONG, LONG, &f)
        });
        std::thread::sleep(Duration::from_millis(20));
        rdv.post(0, 2, 7, b"id").unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), b"id".to_vec());
        let short = Duration::from_millis(50);
        match rdv.take("test", 1, 0, 8, Instant::now() + short, short, &flag) {
            Err(Error::ControlTimeout { rank: 1, missing, .. }) => assert_eq!(missing, vec![0]),
            other => panic!("expected a timeout naming rank 0, got {other:?}"),
        }
        flag.raise();
        let t0 = Instant::now();
        let res = rdv.take("test", 1, 0, 9, Instant::now() + LONG, LONG, &flag);
        assert!(matches!(res, Err(Error::Aborted { rank: 1, .. })), "{res:?}");
        assert!(t0.elapsed() < Duration::from_secs(1));
        assert!(rdv.post(0, 3, 1, b"").is_err());
    }

    #[test]
    fn double_entry_and_bad_rank_are_refused() {
        let rdv = Arc::new(Rendezvous::new(2, AbortFlag::new()));
        let flag = AbortFlag::new();
        assert!(matches!(
            rdv.all_gather("test", 2, b"", LONG, &flag),
            Err(Error::InvalidArgument { .. })
        ));
        let r2 = rdv.clone();
        let f2 = flag.clone();
        let first =
            std::thread::spawn(move || r2.all_gather("test", 0, b"a", Duration::from_millis(300), &f2));
        std::thread::sleep(Duration::from_millis(50));
        assert!(matches!(
            rdv.all_gather("test", 0, b"b", LONG, &flag),
            Err(Error::InvalidArgument { rank: 0, .. })
        ));
        assert!(matches!(first.join().unwrap(), Err(Error::ControlTimeout { .. })));
    }
}
