//! The streams a communicator has launched work on, so that `Comm::finalize`, `Comm::destroy`
//! and `Drop` can wait for that work. Streams belong to the user: the registry holds weak
//! handles only, and a stream the user already dropped is skipped (its work was the user's
//! to wait for).

use std::sync::{Mutex, Weak};

use crate::backend::{cpu::CpuStream, gpu::GpuStream, Stream};

enum WeakStream {
    Gpu(Weak<GpuStream>),
    Cpu(Weak<CpuStream>),
}

impl WeakStream {
    fn of(s: &Stream) -> Self {
        match s {
            Stream::Gpu(a) => WeakStream::Gpu(std::sync::Arc::downgrade(a)),
            Stream::Cpu(a) => WeakStream::Cpu(std::sync::Arc::downgrade(a)),
        }
    }

    fn is(&self, s: &Stream) -> bool {
        match (self, s) {
            (WeakStream::Gpu(w), Stream::Gpu(a)) => std::ptr::eq(w.as_ptr(), std::sync::Arc::as_ptr(a)),
            (WeakStream::Cpu(w), Stream::Cpu(a)) => std::ptr::eq(w.as_ptr(), std::sync::Arc::as_ptr(a)),
            _ => false,
        }
    }

    fn upgrade(&self) -> Option<Stream> {
        match self {
            WeakStream::Gpu(w) => w.upgrade().map(Stream::Gpu),
            WeakStream::Cpu(w) => w.upgrade().map(Stream::Cpu),
        }
    }

    fn alive(&self) -> bool {
        match self {
            WeakStream::Gpu(w) => w.strong_count() > 0,
            WeakStream::Cpu(w) => w.strong_count() > 0,
        }
    }
}

/// Weak handles to the streams one rank launched on (each once).
#[derive(Default)]
pub(crate) struct StreamRegistry {
    streams: Mutex<Vec<WeakStream>>,
}

impl StreamRegistry {
    /// Remember `stream` (a no-op when it is known; forgets dropped streams).
    pub fn note(&self, stream: &Stream) {
        let mut v = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        if v.iter().rev().any(|w| w.is(stream)) {
            return;
        }
        v.retain(WeakStream::alive);
        v.push(WeakStream::of(stream));
    }

    /// The streams still alive.
    pub fn live(&self) -> Vec<Stream> {
        let v = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        v.iter().filter_map(WeakStream::upgrade).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{cpu::CpuBackend, Backend};

    #[test]
    fn notes_each_stream_once_and_forgets_dropped_ones() {
        let b = CpuBackend::new();
        let (s1, s2) = (b.create_stream(0).unwrap(), b.create_stream(0).unwrap());
        let reg = StreamRegistry::default();
        reg.note(&s1);
        reg.note(&s2);
        reg.note(&s1.clone());
        assert_eq!(reg.live().len(), 2);
        drop(s2);
        assert_eq!(reg.live().len(), 1);
        let s3 = b.create_stream(0).unwrap();
        reg.note(&s3);
        assert_eq!(reg.streams.lock().unwrap().len(), 2);
    }
}
